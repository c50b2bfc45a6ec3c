"""Taking back borrowed capacity: a tenant placed above its guarantee borrowed the
capacity, and gives it back, with notice and a grace period, when another tenant that is
still within its guarantee waits for it in the pool's queue.

One pass (beat, every minute, ``reports.tasks.take_back_borrowed``; tests pass ``now``):

- for each pool, the first approved request in queue order that has waited at least
  ``TAKE_BACK_AFTER`` seconds and would keep its tenant within its guarantee;
- ``pools.interface.release_plan`` picks, of the other tenants' borrowed leases in the
  pool (newest first; not exempt, not already warned), the fewest whose release lets it
  be placed (none when it fits already, or when even all of them would not do);
- each is warned through the shared reclaim flow (``ReclaimWarning`` with cause
  ``borrowed``, the ``reclaim_warned`` signal, a notice to its requester; appeals and
  exemptions as for idle leases), and released after the pool's grace period
  (``reports.services.release_warned``); the queue then places the waiting request;
- a take-back whose request no longer waits (placed, cancelled) is withdrawn.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from audit.interface import record, snapshot
from pools.choices import LeaseState
from pools.interface import Ask, release_plan
from pools.models import Lease
from quotas.choices import NoticeKind, RequestState
from quotas.interface import announce_id, demand_of, quota_usage
from quotas.models import GpuRequest
from reports.choices import OPEN_WARNINGS, WarningCause, WarningState
from reports.models import ReclaimPolicy, ReclaimWarning
from reports.services import close_warning, exempt_lease_ids, release_warned, send_after_commit
from reports.signals import reclaim_warned

DEFAULT_GRACE_HOURS = ReclaimPolicy._meta.get_field("grace_hours").default


def _wait() -> timedelta:
    # Placement runs after every approval and release and every 15 s on beat: a request
    # still queued after this long waits for capacity, not for its turn to be tried.
    return timedelta(seconds=getattr(settings, "TAKE_BACK_AFTER", 60))


def within_guarantee(req: GpuRequest) -> bool:
    """Whether placing ``req`` keeps its tenant within its guarantee in every dimension
    (held now plus the request's vGPUs, compute and memory)."""
    usage = next((u for u in quota_usage([req.tenant_id]) if u.quota.pool_id == req.pool_id), None)
    if usage is None:
        return False
    quota, used, ask = usage.quota, usage.used, demand_of(req)
    return (
        used.vgpus + ask.vgpus <= quota.guaranteed_vgpus
        and used.compute_pct + ask.compute_pct <= quota.guaranteed_compute_pct
        and used.memory_mib + ask.memory_mib <= quota.guaranteed_memory_mib
    )


def _waiting(now: datetime) -> list[GpuRequest]:
    """Per pool, the first request in queue order that waited long enough and is within
    its tenant's guarantee."""
    queue = (
        GpuRequest.objects.filter(state=RequestState.APPROVED, queued_at__lte=now - _wait())
        .select_related("pool", "tenant")
        .order_by("pool_id", "-priority", "queued_at", "pk")
    )
    first: dict[int, GpuRequest] = {}
    for req in queue:
        if req.pool_id not in first and within_guarantee(req):
            first[req.pool_id] = req
    return list(first.values())


def take_back(now: datetime | None = None) -> dict[str, int]:
    """One pass: withdraw take-backs no longer needed, release those past their grace,
    warn the borrowed leases a waiting request within its guarantee needs."""
    now = now or timezone.now()
    counts = {"warned": 0, "withdrawn": 0, "released": 0}
    open_ = list(
        ReclaimWarning.objects.filter(cause=WarningCause.BORROWED, state__in=OPEN_WARNINGS)
    )
    waiting_ids = set(
        GpuRequest.objects.filter(
            pk__in={w.needed_by_id for w in open_}, state=RequestState.APPROVED
        ).values_list("pk", flat=True)
    )
    active = set(
        Lease.objects.filter(pk__in={w.lease_id for w in open_}, state=LeaseState.ACTIVE)
        .values_list("pk", flat=True)
    )  # fmt: skip
    exempt = exempt_lease_ids(now)
    for warning in open_:
        if (
            warning.needed_by_id not in waiting_ids
            or warning.lease_id not in active
            or warning.lease_id in exempt
        ):
            counts["withdrawn"] += close_warning(warning.pk, WarningState.WITHDRAWN, now)
        elif warning.state == WarningState.WARNED and now >= warning.release_after:
            counts["released"] += release_warned(warning.pk, now)
    for req in _waiting(now):
        counts["warned"] += _warn_for(req, now)
    return counts


def _warn_for(req: GpuRequest, now: datetime) -> int:
    """Warn the fewest borrowed leases of other tenants whose release lets ``req`` fit."""
    pool = req.pool
    taken = ReclaimWarning.objects.filter(needed_by_id=req.pk, state__in=OPEN_WARNINGS)
    already = set(taken.values_list("lease_id", flat=True))
    # Leases already warned (for this or another reason) or exempt are not picked again.
    busy = set(
        ReclaimWarning.objects.filter(state__in=OPEN_WARNINGS).values_list("lease_id", flat=True)
    ) | exempt_lease_ids(now)
    candidates = [
        lease_id
        for lease_id in GpuRequest.objects.filter(
            pool=pool, state=RequestState.ALLOCATED, borrowed=True, lease__isnull=False,
            lease__state=LeaseState.ACTIVE,
        )
        .exclude(tenant_id=req.tenant_id)
        .order_by("-placed_at", "-pk")
        .values_list("lease_id", flat=True)
        if lease_id not in busy
    ]  # fmt: skip
    if not candidates:
        return 0
    chosen = release_plan(pool, Ask.of(req, pool.policy), candidates, already)
    if not chosen:
        return 0
    policy = ReclaimPolicy.objects.filter(pool=pool).first()
    grace = timedelta(hours=policy.grace_hours if policy else DEFAULT_GRACE_HOURS)
    warned = sum(_warn(lease_id, req, now, grace) for lease_id in chosen)
    if warned and not already:
        with transaction.atomic():
            announce_id(req.pk, NoticeKind.TAKING_BACK)
    return warned


def _warn(lease_id: int, req: GpuRequest, now: datetime, grace: timedelta) -> int:
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease_id)
        holder = GpuRequest.objects.filter(lease_id=lease_id).values("pk", "tenant_id").first()
        if (
            holder is None
            or lease.state != LeaseState.ACTIVE
            or ReclaimWarning.objects.filter(lease_id=lease_id, state__in=OPEN_WARNINGS).exists()
        ):
            return 0
        # The owner's words never name the other tenant; the audit keeps its request id.
        reason = _("capacity borrowed above guarantee is needed by another tenant")
        warning = ReclaimWarning.objects.create(
            lease=lease, tenant_id=holder["tenant_id"], warned_at=now,
            release_after=now + grace, cause=WarningCause.BORROWED, reason=reason,
            needed_by_id=req.pk,
        )  # fmt: skip
        record("reclaim.take_back", lease, tenant_id=holder["tenant_id"],
               after=snapshot(warning),
               message=f"capacity borrowed above guarantee is needed by tenant {req.tenant.name}"
                       f" (request {req.pk})")  # fmt: skip
        announce_id(holder["pk"], NoticeKind.TAKE_BACK, comment=reason)
        send_after_commit(
            reclaim_warned, warning, release_after=warning.release_after,
            cause=WarningCause.BORROWED, reason=reason,
        )  # fmt: skip
    return 1
