"""Reconciliation: the portal's allocations, the agents' slices and the card counters agree.

Four kinds of drift, each found, repaired and counted (``/metrics``:
``gpuportal_reconcile_drift_total{kind}``):

- ``held_after_release``: an agent reports a slice the portal does not hold on that node
  (released, moved or stranded): its desired state is sent again.
- ``never_taken``: an active slice its agent has not confirmed a minute after placement:
  sent again; after ``POOLS_SYNC_MAX_ATTEMPTS`` unconfirmed sends it is marked failed.
- ``counters``: a card whose counters are not the sum of its active slices: rewritten
  from the slices, in a transaction with the card row locked.
- ``stranded``: an active slice whose card was deleted or left its pool: re-placed, or
  stranded with its capacity released (``pools.failover``).

So quota and capacity are never held by something that no longer exists.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from agents.choices import NodeSource
from agents.models import Node
from pools import failover
from pools.agent_reports import held_slices
from pools.choices import AgentSync, AllocationState
from pools.models import Allocation, NodeSync, PoolCard
from portal import redis_client
from telemetry import interface as telemetry

logger = logging.getLogger(__name__)

KINDS = ("held_after_release", "never_taken", "counters", "stranded")
# A slice placed this long ago and still not confirmed by its agent is drift.
CONFIRM_WITHIN = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class Drift:
    kind: str
    node_id: int | None = None
    allocation_id: int | None = None
    pool_card_id: int | None = None
    detail: str = ""


@dataclass
class Repair:
    found: Counter = field(default_factory=Counter)
    resend: set[int] = field(default_factory=set)  # nodes to send their desired state
    counters_fixed: int = 0
    moved: int = 0
    stranded: int = 0


def _counters_key() -> str:
    return redis_client.key("pools", "reconcile", "drift")


def counted() -> dict[str, int]:
    """Drift found since the counters began, by kind (for /metrics)."""
    raw = redis_client.client().hgetall(_counters_key())
    totals = dict.fromkeys(KINDS, 0)
    totals.update({k.decode(): int(v) for k, v in raw.items() if k.decode() in totals})
    return totals


def _count(found: Counter) -> None:
    if found:
        pipe = redis_client.client().pipeline(transaction=False)
        for kind, n in found.items():
            pipe.hincrby(_counters_key(), kind, n)
        pipe.execute()


def _agent_drift() -> list[Drift]:
    nodes = list(
        Node.objects.filter(source=NodeSource.AGENT)
        .exclude(agent_url="")
        .values_list("pk", flat=True)
    )
    active: dict[int, set[str]] = defaultdict(set)
    for pk, node_id in Allocation.objects.filter(
        state=AllocationState.ACTIVE, gpu__node_id__in=nodes
    ).values_list("pk", "gpu__node_id"):
        active[node_id].add(f"alloc-{pk}")
    out = []
    for node_id, reading in telemetry.latest(nodes).items():
        for agent_id in sorted(held_slices(reading) - active.get(node_id, set())):
            out.append(Drift("held_after_release", node_id=node_id, detail=agent_id))
    late = timezone.now() - CONFIRM_WITHIN
    # Failed ones are no longer drift: they are shown as failed, and sent with the rest.
    for pk, node_id in Allocation.objects.filter(
        state=AllocationState.ACTIVE, gpu__isnull=False, placed_at__lt=late,
        agent_sync=AgentSync.PENDING,
    ).values_list("pk", "gpu__node_id"):  # fmt: skip
        out.append(Drift("never_taken", node_id=node_id, allocation_id=pk))
    return out


def _card_sums() -> dict[tuple[int, int], tuple[int, int, int, bool]]:
    rows = (
        Allocation.objects.filter(state=AllocationState.ACTIVE, gpu__isnull=False)
        .values("gpu_id", "pool_id")
        .annotate(
            compute=Sum("compute_pct"), memory=Sum("memory_mib"), n=Count("pk"),
            whole=Count("pk", filter=Q(whole_card=True)),
        )
    )  # fmt: skip
    return {
        (r["gpu_id"], r["pool_id"]): (r["compute"], r["memory"], r["n"], r["whole"] > 0)
        for r in rows
    }


def _wanted(card: PoolCard, sums: tuple[int, int, int, bool] | None) -> dict[str, object]:
    compute, memory, n, whole = sums or (0, 0, 0, False)
    if whole:
        # A whole card holds its full capacity, whatever its slice's recorded size.
        compute, memory = card.compute_capacity, card.memory_capacity_mib
    return {
        "compute_allocated": compute, "memory_allocated_mib": memory,
        "slices": n, "held_whole": whole,
    }  # fmt: skip


def _counter_drift() -> list[Drift]:
    sums = _card_sums()
    out = []
    for card in PoolCard.objects.all().only(
        "pk", "pool_id", "gpu_id", "compute_capacity", "memory_capacity_mib",
        "compute_allocated", "memory_allocated_mib", "slices", "held_whole",
    ):  # fmt: skip
        wanted = _wanted(card, sums.get((card.gpu_id, card.pool_id)))
        off = {k: (getattr(card, k), v) for k, v in wanted.items() if getattr(card, k) != v}
        if off:
            detail = ", ".join(f"{k} {have} != {want}" for k, (have, want) in sorted(off.items()))
            out.append(Drift("counters", pool_card_id=card.pk, detail=detail))
    return out


def _stranded_drift() -> list[Drift]:
    """Active slices held on nothing: their card deleted, or no longer in their pool."""
    rows = (
        Allocation.objects.filter(state=AllocationState.ACTIVE)
        .filter(Q(gpu=None) | ~Q(gpu__pool_card__pool_id=F("pool_id")))
        .values_list("pk", "gpu_id")
    )
    return [
        Drift("stranded", allocation_id=pk,
              detail="card deleted" if gpu is None else "card left its pool")
        for pk, gpu in rows
    ]  # fmt: skip


def drift() -> list[Drift]:
    """Everything that does not add up now, for pages and the reconcile task."""
    return _agent_drift() + _counter_drift() + _stranded_drift()


def repair_counters(pool_card_id: int) -> bool:
    """Rewrite a card's counters from its active slices, the card row locked (placements
    on it wait). False when they already agreed, or the slices exceed its capacity (then
    the counters stay, and the drift stays visible)."""
    try:
        with transaction.atomic():
            card = PoolCard.objects.select_for_update().filter(pk=pool_card_id).first()
            if card is None:
                return False
            sums = (
                Allocation.objects.filter(
                    state=AllocationState.ACTIVE, gpu_id=card.gpu_id, pool_id=card.pool_id
                ).aggregate(
                    compute=Sum("compute_pct"), memory=Sum("memory_mib"), n=Count("pk"),
                    whole=Count("pk", filter=Q(whole_card=True)),
                )
            )  # fmt: skip
            values = (sums["compute"] or 0, sums["memory"] or 0, sums["n"], sums["whole"] > 0)
            wanted = _wanted(card, values if sums["n"] else None)
            if all(getattr(card, k) == v for k, v in wanted.items()):
                return False
            PoolCard.objects.filter(pk=card.pk).update(**wanted)
            return True
    except IntegrityError:
        logger.error("pool card %s: its active slices exceed its capacity", pool_card_id)
        return False


def due_for_resend() -> set[int]:
    """Nodes holding slices whose agents have not been sent their state for a while."""
    stale = timezone.now() - timedelta(seconds=settings.POOLS_SYNC_EVERY_S)
    holding = set(
        Allocation.objects.filter(state=AllocationState.ACTIVE, gpu__isnull=False).values_list(
            "gpu__node_id", flat=True
        )
    )
    fresh = set(
        NodeSync.objects.filter(node_id__in=holding, sent_at__gte=stale).values_list(
            "node_id", flat=True
        )
    )
    return holding - fresh


def reconcile() -> Repair:
    """Find every drift, count it, and repair it (re-sends are left to the caller)."""
    result = Repair()
    found = drift()
    result.found = Counter(d.kind for d in found)
    _count(result.found)
    for item in found:
        if item.kind in ("held_after_release", "never_taken") and item.node_id:
            result.resend.add(item.node_id)
        elif item.kind == "counters" and item.pool_card_id:
            result.counters_fixed += repair_counters(item.pool_card_id)
    moves = failover.move_failed()
    result.moved, result.stranded = len(moves.moved), len(moves.stranded)
    retried = failover.retry_stranded()
    result.moved += len(retried.moved)
    result.resend |= due_for_resend()
    return result
