"""Who may see and change what in tenancy: one set of rules for the pages, the API and the
websocket consumers.

Roles, from the widest:

- **platform admin** (``is_platform_admin``, the one rule every app asks): an active user
  holding ``quotas.change_tenant`` (a superuser holds every permission; an operator grants
  it to a user or a group). Creates tenants, sets quotas, sees and decides every tenant's
  requests, alerts and reports. Nodes, pools, the audit log and the Django admin are
  capabilities of their own (their permissions, ``is_staff``), not part of the role.
- **tenant admin** (``Role.ADMIN``): manages the tenant's members and their roles, approves.
- **approver** (``Role.APPROVER``): approves the tenant's GPU requests.
- **member** (``Role.MEMBER``): asks for GPUs, sees the tenant's members, quotas and usage.

A user can belong to several tenants, with a role in each. Everything a user may not see
is answered as absent (404), never as forbidden, so tenant names do not leak.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import timedelta
from functools import reduce

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db.models import Q, QuerySet
from django.utils import timezone
from rest_framework import permissions
from rest_framework.request import Request

from pools.models import Allocation
from quotas.choices import Role
from quotas.models import GpuRequest, Membership, Tenant

CHANGE_TENANT = "quotas.change_tenant"
APPROVING_ROLES = (Role.ADMIN, Role.APPROVER)

User = AbstractBaseUser | AnonymousUser


def is_platform_admin(user: User) -> bool:
    """Whether ``user`` is a platform admin: the only test of it (never ``is_superuser``,
    never ``is_staff``). Django caches the user's permissions on the object, so asking
    again in the same request costs no query."""
    return bool(user and user.is_authenticated and user.has_perm(CHANGE_TENANT))


def holders_of(perm: str) -> Q:
    """A filter over users: those ``user.has_perm(perm)`` says yes to under Django's
    ModelBackend (which the portal's backend extends): active, and a superuser or granted
    the permission directly or through a group. Subqueries, not joins, so it multiplies no
    rows and combines with any other filter; for asking about many users in one query."""
    app_label, codename = perm.split(".")
    granted = {"permission__content_type__app_label": app_label, "permission__codename": codename}
    direct = get_user_model().user_permissions.through.objects.filter(**granted)
    groups = Group.permissions.through.objects.filter(**granted).values("group_id")
    through_group = get_user_model().groups.through.objects.filter(group_id__in=groups)
    return Q(is_active=True) & (
        Q(is_superuser=True)
        | Q(pk__in=direct.values("user_id"))
        | Q(pk__in=through_group.values("user_id"))
    )


def platform_admins() -> Q:
    """``is_platform_admin`` as a filter over users, for the notices and digests that pick
    their recipients in one query."""
    return holders_of(CHANGE_TENANT)


def role_in(user: User, tenant: Tenant | int) -> str | None:
    """The user's role in the tenant, or None when not a member."""
    if not user.is_authenticated:
        return None
    tenant_id = tenant if isinstance(tenant, int) else tenant.pk
    return (
        Membership.objects.filter(user_id=user.pk, tenant_id=tenant_id)
        .values_list("role", flat=True)
        .first()
    )


def tenant_ids_of(user: User, roles: tuple[str, ...] | None = None) -> QuerySet:
    """The ids of the tenants the user belongs to (with one of ``roles``), as a subquery."""
    rows = Membership.objects.filter(user_id=user.pk if user.is_authenticated else None)
    if roles is not None:
        rows = rows.filter(role__in=roles)
    return rows.values("tenant_id")


def tenants_of(user: User) -> QuerySet[Tenant]:
    """The tenants the user is a member of, whatever the role (none for anonymous)."""
    return Tenant.objects.filter(pk__in=tenant_ids_of(user))


def visible_tenants(user: User) -> QuerySet[Tenant]:
    """Every tenant for a platform admin; the user's own tenants for anyone else."""
    if is_platform_admin(user):
        return Tenant.objects.all()
    return tenants_of(user)


def can_view_tenant(user: User, tenant: Tenant) -> bool:
    return is_platform_admin(user) or role_in(user, tenant) is not None


def can_manage_tenant(user: User, tenant: Tenant | None = None) -> bool:
    """Create, rename and delete tenants and set their quotas: platform admins only.
    (A tenant admin manages the members, not the tenant's limits.)"""
    return is_platform_admin(user)


def can_manage_users(user: User) -> bool:
    """List every user, make users, deactivate and reactivate them: platform admins.
    (A tenant's admins make new users only by inviting them: ``can_manage_members``.)"""
    return is_platform_admin(user)


def can_manage_members(user: User, tenant: Tenant | int) -> bool:
    """Add and remove members and change their roles: the tenant's admins, platform admins."""
    return is_platform_admin(user) or role_in(user, tenant) == Role.ADMIN


def can_approve(user: User, tenant: Tenant | int) -> bool:
    """Decide the tenant's GPU requests: its approvers and admins, platform admins.
    (``quotas.services.can_decide`` adds that nobody decides their own request.)"""
    return is_platform_admin(user) or role_in(user, tenant) in APPROVING_ROLES


def visible_requests(user: User) -> QuerySet[GpuRequest]:
    """The GPU requests the user may read: all for platform admins; for anyone else those
    of their tenants (members see their team's requests) and their own."""
    if is_platform_admin(user):
        return GpuRequest.objects.all()
    if not user.is_authenticated:
        return GpuRequest.objects.none()
    return GpuRequest.objects.filter(Q(tenant_id__in=tenant_ids_of(user)) | Q(requester=user))


def approvable_requests(user: User) -> QuerySet[GpuRequest]:
    """The requests the user may decide (pending or not), own ones left out."""
    if is_platform_admin(user):
        return GpuRequest.objects.all()
    if not user.is_authenticated:
        return GpuRequest.objects.none()
    return GpuRequest.objects.filter(tenant_id__in=tenant_ids_of(user, APPROVING_ROLES)).exclude(
        requester=user
    )


def leases_visible_to(user: User) -> Q:
    """A filter over ``pools.Lease``: the leases held for the user's tenants' requests, and
    the user's own; every lease for platform admins, who see every tenant's requests
    (``Q()``). Registered with the pools app in ``QuotasConfig.ready``."""
    if not user.is_authenticated:
        return Q(pk__in=[])
    if is_platform_admin(user):
        return Q()
    return Q(gpu_request__tenant_id__in=tenant_ids_of(user)) | Q(holder_id=user.pk)


# How far back a member's grant to see process owners reaches: further than any history
# range the pages offer (7 days), short enough to keep the filter small.
OWNER_GRANT_REACH = timedelta(days=31)


def owners_visible_to(user: User, gpu_ids: Sequence[int]) -> Q | None:
    """A filter over telemetry's owner rollups (``gpu``, ``owner``, ``bucket``): on each
    card, the buckets inside the life of an allocation of one of the user's tenants (of
    any tenant, for platform admins: what each tenant's own people see), registered with
    ``telemetry.interface.grant_owners`` in ``QuotasConfig.ready``. A bucket counts from
    the minute the allocation was placed until it was released."""
    if not user.is_authenticated or not gpu_ids:
        return None
    since = timezone.now() - OWNER_GRANT_REACH
    tenants = (
        Q(lease__gpu_request__isnull=False)
        if is_platform_admin(user)
        else Q(lease__gpu_request__tenant_id__in=tenant_ids_of(user))
    )
    lives = (
        Allocation.objects.filter(tenants, gpu_id__in=list(gpu_ids), placed_at__isnull=False)
        .filter(Q(released_at__isnull=True) | Q(released_at__gte=since))
        .values_list("gpu_id", "placed_at", "released_at")
    )
    granted = []
    for gpu_id, placed_at, released_at in lives:
        q = Q(gpu_id=gpu_id, bucket__gte=placed_at.replace(second=0, microsecond=0))
        if released_at is not None:
            q &= Q(bucket__lt=released_at)
        granted.append(q)
    return reduce(operator.or_, granted) if granted else None


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
