"""Who holds which role, and what each role may do in tenancy: one set of rules for the
pages, the API and the websocket consumers of both halves of quotas, and the apps above.
Who may see and act on a GPU request is ``quotas.requests.permissions``, built on these;
how the tenancy API applies them, ``quotas.tenancy.permissions``.

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

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group
from django.db.models import Q, QuerySet

from quotas.choices import DECIDING_ROLES, Role
from quotas.models import Membership, Tenant

CHANGE_TENANT = "quotas.change_tenant"

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
    tenant_id = getattr(tenant, "pk", tenant)
    return (
        Membership.objects.of(user)
        .filter(tenant_id=tenant_id)
        .values_list("role", flat=True)
        .first()
    )


def tenant_ids_of(user: User, *, deciding: bool = False) -> QuerySet:
    """The ids of the user's tenants (those where they decide, with ``deciding``), as a
    subquery: the one "my tenants" of pages, API, sockets and the apps above."""
    rows = Membership.objects.of(user)
    if deciding:
        rows = rows.deciding()
    return rows.values("tenant_id")


def tenants_of(user: User) -> QuerySet[Tenant]:
    """The tenants the user is a member of, whatever the role (none for anonymous)."""
    return Tenant.objects.filter(pk__in=tenant_ids_of(user))


def administered_tenant_ids(user) -> QuerySet:
    """The ids of the tenants ``user`` (a user or an id) is an admin of, as a subquery."""
    return Membership.objects.of(user).admins().values("tenant_id")


def tenant_admin_ids(tenant_id: int | None) -> set[int]:
    """The user ids of the tenant's admins (none for no tenant)."""
    if tenant_id is None:
        return set()
    return set(Membership.objects.filter(tenant_id=tenant_id).admins()
               .values_list("user_id", flat=True))  # fmt: skip


def tenant_admins() -> Q:
    """A filter over users: the admins of any tenant (as ``platform_admins``, for picking
    recipients in one query)."""
    return Q(pk__in=Membership.objects.admins().values("user_id"))


def tenant_members(tenant_id: int) -> Q:
    """A filter over users: the tenant's members, whatever their role."""
    return Q(pk__in=Membership.objects.filter(tenant_id=tenant_id).values("user_id"))


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
    (``can_decide`` adds that nobody decides their own request.)"""
    return is_platform_admin(user) or role_in(user, tenant) in DECIDING_ROLES


def approves_somewhere(user: User) -> bool:
    """Whether the approvals queue is for ``user``: a platform admin, or an approver or
    admin of some tenant."""
    return is_platform_admin(user) or tenant_ids_of(user, deciding=True).exists()
