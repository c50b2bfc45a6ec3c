"""Who may see and act on GPU requests, and what of the pools' leases and telemetry's
process owners a user sees because of them: one set of rules for the pages, the API and
the websocket. Built on the roles of ``quotas.permissions`` (a platform admin, a tenant's
deciding roles); nothing outside quotas asks these (``QuotasConfig.ready`` registers the
lease and process-owner rules with the apps below).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import timedelta
from functools import reduce

from django.db.models import Q, QuerySet
from django.utils import timezone

from pools.models import Allocation, AllocationSpan
from quotas.choices import RequestState, Role
from quotas.models import GpuRequest
from quotas.permissions import User, can_approve, is_platform_admin, role_in, tenant_ids_of


def visible_requests(user: User) -> QuerySet[GpuRequest]:
    """The GPU requests the user may read (pages, API, socket parts): all for platform
    admins; for anyone else their tenants' and their own. Their own stay theirs after they
    leave the tenant: they may still hold its GPUs (leaving releases nothing), and are
    still told of each step, as they still see the lease (``leases_visible_to``)."""
    rows = GpuRequest.objects.select_related("tenant", "pool", "requester", "decided_by")
    if is_platform_admin(user):
        return rows
    if not user.is_authenticated:
        return rows.none()
    return rows.filter(Q(tenant_id__in=tenant_ids_of(user)) | Q(requester_id=user.pk))


def can_decide(user: User, req: GpuRequest) -> bool:
    """Approve or reject: the tenant's approvers and admins, and platform admins; never
    the requester alone (nobody decides their own request, unless a platform admin)."""
    if is_platform_admin(user):
        return True
    return can_approve(user, req.tenant_id) and user.pk != req.requester_id


def can_manage(user: User, req: GpuRequest) -> bool:
    """Release, extend, resize or cancel: the requester (while still a member), the
    tenant's admins, platform admins."""
    if not user.is_authenticated:
        return False
    if is_platform_admin(user):
        return True
    role = role_in(user, req.tenant_id)
    return role == Role.ADMIN or (role is not None and user.pk == req.requester_id)


def decidable_requests(user: User) -> QuerySet[GpuRequest]:
    """Pending requests and pending extensions ``user`` may decide, oldest first."""
    waiting = Q(state=RequestState.PENDING) | Q(
        state=RequestState.ALLOCATED, extension_hours__isnull=False
    )
    rows = visible_requests(user).filter(waiting).order_by("created", "pk")
    if is_platform_admin(user):
        return rows
    return rows.filter(tenant_id__in=tenant_ids_of(user, deciding=True)).exclude(requester=user)


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
    the minute the allocation was placed until it was released, and over each span it held
    a card before a move."""
    if not user.is_authenticated or not gpu_ids:
        return None
    since = timezone.now() - OWNER_GRANT_REACH
    admin = is_platform_admin(user)

    def tenants(prefix: str = "") -> Q:
        if admin:
            return Q(**{f"{prefix}lease__gpu_request__isnull": False})
        return Q(**{f"{prefix}lease__gpu_request__tenant_id__in": tenant_ids_of(user)})

    lives = (
        Allocation.objects.filter(tenants(), gpu_id__in=list(gpu_ids), placed_at__isnull=False)
        .filter(Q(released_at__isnull=True) | Q(released_at__gte=since))
        .values_list("gpu_id", "placed_at", "released_at")
    )
    # A slice moved off a card (or stranded) still owned its time there.
    earlier = (
        AllocationSpan.objects.filter(
            tenants("allocation__"),
            gpu_id__in=list(gpu_ids), released_at__gte=since,
        ).values_list("gpu_id", "placed_at", "released_at")
    )  # fmt: skip
    granted = []
    for gpu_id, placed_at, released_at in [*lives, *earlier]:
        q = Q(gpu_id=gpu_id, bucket__gte=placed_at.replace(second=0, microsecond=0))
        if released_at is not None:
            q &= Q(bucket__lt=released_at)
        granted.append(q)
    return reduce(operator.or_, granted) if granted else None
