"""Who may read and change pools, and whose vGPUs (leases) a user may see.

One rule for the API, the pages, the live push and the admin. Pools and their capacity are
read by every signed-in member; creating, changing and deleting them takes Django's model
permissions (``pools.add_pool``, ``change_pool``, ``delete_pool``), as the admin checks
them, so a platform admin is granted exactly that and being staff grants nothing by itself.

Leases are narrower: a user sees those they hold, and all of them with
``pools.view_allocation``. Apps above pools widen that with ``grant_leases`` from their
``AppConfig.ready`` (tenancy: a member sees their tenants' leases), without pools
importing them, as ``telemetry.permissions.grant_owners`` does for process owners.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from functools import reduce

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet
from rest_framework import permissions
from rest_framework.request import Request

from pools.models import Allocation, Lease

ADD_POOL = "pools.add_pool"
CHANGE_POOL = "pools.change_pool"
DELETE_POOL = "pools.delete_pool"
POOL_WRITES = (ADD_POOL, CHANGE_POOL, DELETE_POOL)
VIEW_ALLOCATION = "pools.view_allocation"

User = AbstractBaseUser | AnonymousUser
# A rule from an app above pools: the leases (a filter on Lease) it lets ``user`` see, or
# None for none of them.
LeaseGrant = Callable[[User], Q | None]

_grants: list[LeaseGrant] = []


def grant_leases(rule: LeaseGrant) -> LeaseGrant:
    """Register a further rule for ``visible_leases``; call it from ``AppConfig.ready``.

    E.g. quotas' ``leases_visible_to``: its tenants' leases. A rule may join to many rows:
    ``visible_leases`` answers each lease once whatever the join.
    """
    _grants.append(rule)
    return rule


def can_read_pools(user: User) -> bool:
    return bool(user and user.is_authenticated)


def can_add_pools(user: User) -> bool:
    return user.has_perm(ADD_POOL)


def can_change_pools(user: User) -> bool:
    return user.has_perm(CHANGE_POOL)


def can_delete_pools(user: User) -> bool:
    return user.has_perm(DELETE_POOL)


def can_manage_pools(user: User) -> bool:
    """Any pool write: enough to see the management links."""
    return any(user.has_perm(perm) for perm in POOL_WRITES)


def can_view_all_leases(user: User) -> bool:
    return user.has_perm(VIEW_ALLOCATION)


def lease_filter(user: User) -> Q | None:
    """The leases ``user`` may see as a filter on Lease: ``Q()`` for all, None for none."""
    if not user or not user.is_authenticated:
        return None
    if can_view_all_leases(user):
        return Q()
    granted = [q for rule in _grants if (q := rule(user)) is not None]
    if any(not q for q in granted):
        return Q()  # a rule granting everything wins, Q() | Q(x) would be Q(x)
    return reduce(operator.or_, granted, Q(holder=user))


def visible_leases(user: User) -> QuerySet[Lease]:
    """The leases ``user`` may see, each once."""
    rule = lease_filter(user)
    if rule is None:
        return Lease.objects.none()
    if not rule:
        return Lease.objects.all()
    if not _grants:
        return Lease.objects.filter(rule)
    # A rule may join through memberships: narrow by id, so no lease comes twice.
    return Lease.objects.filter(pk__in=Lease.objects.filter(rule).values("pk"))


def visible_allocations(user: User) -> QuerySet[Allocation]:
    """The vGPUs of the leases ``user`` may see."""
    rule = lease_filter(user)
    if rule is None:
        return Allocation.objects.none()
    if not rule:
        return Allocation.objects.all()
    return Allocation.objects.filter(lease__in=visible_leases(user).values("pk"))


class PoolPermissions(permissions.DjangoModelPermissions):
    """Reads for any signed-in member; writes by model permission, as the admin checks them.

    ``GET`` needs no permission (DjangoModelPermissions maps it to none); ``POST`` takes
    ``add_pool``, ``PUT``/``PATCH`` ``change_pool``, ``DELETE`` ``delete_pool``. Adding and
    removing a pool's cards is a change of the pool (``action_perms``).
    """

    action_perms = {"add_cards": can_change_pools, "remove_cards": can_change_pools}

    def has_permission(self, request: Request, view) -> bool:
        check = self.action_perms.get(getattr(view, "action", None) or "")
        if check is None:
            return super().has_permission(request, view)
        user = request.user
        return bool(user and user.is_authenticated and check(user))


class AllocationPermissions(permissions.IsAuthenticated):
    """Any signed-in member; which allocations they get is ``visible_allocations``."""


class PoolReadPermissions(permissions.IsAuthenticated):
    """Read-only endpoints about pools (their cards): any signed-in member."""
