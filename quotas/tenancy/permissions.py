"""How the tenancy API applies the capability rules of ``quotas.permissions`` (who
manages tenants, quotas and members): the DRF permission of its viewsets."""

from __future__ import annotations

from rest_framework import permissions
from rest_framework.request import Request

from quotas.models import Membership
from quotas.permissions import can_manage_members, is_platform_admin


def _acts_on_one(view) -> bool:
    """Whether the call names one object (a detail route), found through the queryset."""
    return (getattr(view, "lookup_url_kwarg", None) or view.lookup_field) in view.kwargs


class TenantPermissions(permissions.BasePermission):
    """Signed in to read (the querysets narrow what each user sees: others' tenants are
    404); writes to tenants and quotas by platform admins; memberships by the tenant's
    admins, checked on the object and again in the services.

    A write to one object is judged once it is found, as the pages do: another tenant's
    tenant or quota is 404 (it is not there for the caller), one's own but not one's to
    change is 403. Creating is judged at once (the tenant is in the body, not the path)."""

    def has_permission(self, request: Request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if request.method in permissions.SAFE_METHODS:
            return True
        if getattr(view, "members_may_write", False) or is_platform_admin(user):
            return True
        return _acts_on_one(view)

    def has_object_permission(self, request: Request, view, obj) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return True
        if isinstance(obj, Membership):
            return can_manage_members(request.user, obj.tenant_id)
        return is_platform_admin(request.user)
