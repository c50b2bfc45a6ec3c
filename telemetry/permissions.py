"""Who may read telemetry, and whose processes they may see in it.

Readings, cards and their history are open to every signed-in member. Process owners (the
Unix users running on a card, in history) are not: by default only users granted
``telemetry.view_process_owners`` (superusers have every permission) see them; others see
the card's usage without names. Apps above telemetry widen that with ``grant_owners``: the
tenancy issue lets a member see the owners of their own tenant's allocations.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import reduce

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q
from rest_framework import permissions

VIEW_PROCESS_OWNERS = "telemetry.view_process_owners"

User = AbstractBaseUser | AnonymousUser
# A rule from an app above telemetry: for a user and some cards, the owner rollup rows
# (fields ``gpu``, ``owner``, ``bucket``) it lets them see, or None for none.
OwnerGrant = Callable[[User, Sequence[int]], Q | None]

_grants: list[OwnerGrant] = []


def grant_owners(grant: OwnerGrant) -> OwnerGrant:
    """Register a further rule for ``visible_owners``; call it from ``AppConfig.ready``.

    Telemetry cannot import the apps above it, so they register here instead: e.g. a rule
    answering ``Q(gpu_id=card, bucket__gte=start, bucket__lt=end)`` for each allocation of
    the user's tenants.
    """
    _grants.append(grant)
    return grant


def can_view_all_owners(user: User) -> bool:
    return user.has_perm(VIEW_PROCESS_OWNERS)


def visible_owners(user: User, gpu_ids: Sequence[int]) -> Q | None:
    """Which process owners of these cards the user may see, as a filter on the owner
    rollups: ``Q()`` for all of them, None for none."""
    if not user.is_authenticated:
        return None
    if can_view_all_owners(user):
        return Q()
    granted = [q for grant in _grants if (q := grant(user, gpu_ids)) is not None]
    if not granted:
        return None
    # An empty Q is "everything", but Q() | Q(x) is Q(x): it must win, not vanish.
    return Q() if any(not q for q in granted) else reduce(operator.or_, granted)


class ReadingPermissions(permissions.IsAuthenticated):
    """Cards, readings and history: any signed-in member; process owners are narrowed
    inside the answer (``visible_owners``), not refused. The tenancy issue may narrow
    which cards a member reads here."""
