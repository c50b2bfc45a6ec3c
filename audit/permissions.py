"""Who reads the audit log: holders of Django's ``audit.view_auditentry`` (a superuser has
it), the same rule for the page, the API and the admin. Its own permission, as nodes and
pools have theirs: being a platform admin (``quotas.change_tenant``) does not give it
(docs/tenancy.md, "Platform admin: one rule"). Tenant admins reading their own tenants'
entries (``tenant_id``) come with the tenancy roles; not yet."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from rest_framework import permissions
from rest_framework.request import Request

VIEW_AUDIT = "audit.view_auditentry"


def can_read_audit(user: AbstractBaseUser | AnonymousUser) -> bool:
    return bool(user and user.is_authenticated and user.has_perm(VIEW_AUDIT))


class AuditEntryPermissions(permissions.BasePermission):
    """Readers only: the viewset has no write method, so a reader's write is a 405."""

    def has_permission(self, request: Request, view) -> bool:
        return can_read_audit(request.user)
