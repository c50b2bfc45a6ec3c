"""The company directory page (platform admins): how sign-in is set up, the mapping of
directory groups to tenants and roles (edited in the Django admin), and each directory
user's last sync."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from directory import sync
from directory.models import DirectoryAccount, GroupMapping
from portal.security import allowed_if
from quotas.permissions import is_platform_admin


@allowed_if(is_platform_admin)
def overview(request: HttpRequest) -> HttpResponse:
    context = {
        "configured": bool(getattr(settings, "LDAP", None)),
        "server": getattr(settings, "AUTH_LDAP_SERVER_URI", ""),
        "directory": sync.directory_name(),
        "local_login": settings.LOCAL_LOGIN,
        "sync_every": settings.LDAP_SYNC_EVERY_S,
        "mappings": GroupMapping.objects.select_related("tenant"),
        "accounts": DirectoryAccount.objects.select_related("user").order_by("user__username"),
    }
    return render(request, "directory/overview.html", context)
