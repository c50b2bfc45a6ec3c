"""Who may see and act on GPU requests; the pages, the API and the websocket ask here.

A member sees the requests and allocations of their own tenants, never another tenant's;
platform admins (``quotas.permissions.is_platform_admin``) see all. Deciding is
``services.can_decide``: an approver or admin of the tenant, never on their own request
unless a platform admin.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from quotas.choices import RequestState, Role
from quotas.models import GpuRequest, Membership
from quotas.permissions import is_platform_admin
from quotas.services import can_decide, role_in

__all__ = [
    "approver_tenant_ids", "can_decide", "can_manage", "can_see", "decidable_requests",
    "may_approve_somewhere", "member_tenant_ids", "visible_requests",
]  # fmt: skip

DECIDERS = (Role.APPROVER, Role.ADMIN)


def member_tenant_ids(user) -> set[int]:
    if not user.is_authenticated:
        return set()
    return set(Membership.objects.filter(user=user).values_list("tenant_id", flat=True))


def approver_tenant_ids(user) -> set[int]:
    if not user.is_authenticated:
        return set()
    rows = Membership.objects.filter(user=user, role__in=DECIDERS)
    return set(rows.values_list("tenant_id", flat=True))


def may_approve_somewhere(user) -> bool:
    return user.is_authenticated and (is_platform_admin(user) or bool(approver_tenant_ids(user)))


def visible_requests(user) -> QuerySet[GpuRequest]:
    """The requests ``user`` may see: their tenants' (all, for platform admins)."""
    rows = GpuRequest.objects.select_related("tenant", "pool", "requester", "decided_by")
    if not user.is_authenticated:
        return rows.none()
    if is_platform_admin(user):
        return rows
    return rows.filter(tenant__memberships__user=user)


def can_see(user, req: GpuRequest) -> bool:
    return user.is_authenticated and (
        is_platform_admin(user) or role_in(user, req.tenant_id) is not None
    )


def can_manage(user, req: GpuRequest) -> bool:
    """Release, extend, resize or cancel: the requester (while still a member), the
    tenant's admins, platform admins."""
    if not user.is_authenticated:
        return False
    if is_platform_admin(user):
        return True
    role = role_in(user, req.tenant_id)
    return role == Role.ADMIN or (role is not None and user.pk == req.requester_id)


def decidable_requests(user) -> QuerySet[GpuRequest]:
    """Pending requests and pending extensions ``user`` may decide, oldest first."""
    waiting = Q(state=RequestState.PENDING) | Q(
        state=RequestState.ALLOCATED, extension_hours__isnull=False
    )
    rows = visible_requests(user).filter(waiting).order_by("created", "pk")
    if is_platform_admin(user):
        return rows
    return rows.filter(tenant_id__in=approver_tenant_ids(user)).exclude(requester=user)
