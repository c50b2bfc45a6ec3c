"""The company directory page (platform admins): how sign-in is set up, the mapping of
directory groups to tenants and roles (edited in the Django admin), and each directory
user's last sync. And the two OpenID Connect endpoints (the sign-in's start, the
provider's redirect back), which are directory.oidc's views."""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
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
        "oidc": bool(getattr(settings, "OIDC", None)),
        "oidc_issuer": getattr(settings, "OIDC_ISSUER", ""),
        "oidc_directory": getattr(settings, "OIDC_DIRECTORY_NAME", ""),
        "oidc_groups_claim": getattr(settings, "OIDC_GROUPS_CLAIM", ""),
        "mappings": GroupMapping.objects.select_related("tenant"),
        "accounts": DirectoryAccount.objects.select_related("user").order_by("user__username"),
    }
    return render(request, "directory/overview.html", context)


def _oidc_view(name: str):
    """The OpenID Connect view ``name`` (directory.oidc), imported only when configured:
    without OIDC_ISSUER mozilla-django-oidc need not be installed."""
    if not getattr(settings, "OIDC", None):
        raise Http404
    from directory import oidc

    return getattr(oidc, name).as_view()


def oidc_authenticate(request: HttpRequest) -> HttpResponse:
    return _oidc_view("AuthenticateView")(request)


def oidc_callback(request: HttpRequest) -> HttpResponse:
    return _oidc_view("CallbackView")(request)
