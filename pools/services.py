"""The allocation service: place, resize and release vGPUs without ever overcommitting.

Capacity is taken with one conditional UPDATE per chosen card (``compute_allocated +
x <= compute_capacity``...). PostgreSQL re-checks that condition on the row's newest
version when a racing transaction changed it first, so two requests can never both take
the last slice of a card: the loser updates no row, its savepoint rolls back and it
places again on fresh numbers. Only the chosen cards are locked, so requests on
different cards never wait for one another. The check constraints on ``PoolCard`` are
the last line of defence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents.choices import GpuHealth, NodeState
from agents.models import GPU
from pools import placement
from pools.choices import AllocationState, LeaseState
from pools.models import Allocation, Lease, Pool, PoolCard
from pools.signals import notify_nodes

PLACE_ATTEMPTS = 8


class PlacementError(Exception):
    """The ask cannot be placed; ``never`` when no card of the pool could ever hold it."""

    def __init__(self, message: str, *, never: bool = False) -> None:
        super().__init__(message)
        self.never = never


def pool_cards(pool: Pool, *, schedulable_only: bool = False) -> list[placement.Card]:
    """The pool's cards as placement's plain data."""
    rows = PoolCard.objects.filter(pool=pool).values_list(
        "gpu_id", "gpu__node_id", "gpu__node__name", "gpu__model", "compute_capacity",
        "memory_capacity_mib", "gpu__memory_total_mib", "compute_allocated",
        "memory_allocated_mib", "slices", "held_whole", "cordoned_at", "gpu__health",
        "gpu__node__state", "gpu__node__labels",
    )  # fmt: skip
    if schedulable_only:
        rows = rows.filter(
            cordoned_at=None, gpu__health=GpuHealth.OK, gpu__node__state=NodeState.ONLINE
        )
    return [
        placement.Card(
            id=gpu,
            node_id=node,
            node_name=node_name,
            model=model,
            compute_capacity=c_cap,
            memory_capacity_mib=m_cap,
            memory_physical_mib=physical,
            compute_used=c_used,
            memory_used_mib=m_used,
            slices=slices,
            held_whole=whole,
            schedulable=(cordoned is None and health == GpuHealth.OK and state == NodeState.ONLINE),
            node_labels=labels if isinstance(labels, dict) else {},
        )
        for (
            gpu,
            node,
            node_name,
            model,
            c_cap,
            m_cap,
            physical,
            c_used,
            m_used,
            slices,
            whole,
            cordoned,
            health,
            state,
            labels,
        ) in rows
    ]


def _take(pool_card_filter: dict, card: placement.Card, ask: placement.Ask) -> bool:
    """Take one vGPU's capacity on a card if it is still there; False when it is not."""
    rows = PoolCard.objects.filter(**pool_card_filter, cordoned_at=None, held_whole=False)
    if ask.whole_card:
        return bool(
            rows.filter(slices=0).update(
                held_whole=True,
                slices=1,
                compute_allocated=F("compute_capacity"),
                memory_allocated_mib=F("memory_capacity_mib"),
            )
        )
    return bool(
        rows.filter(
            compute_allocated__lte=F("compute_capacity") - ask.compute_pct,
            memory_allocated_mib__lte=F("memory_capacity_mib") - ask.memory_mib,
        ).update(
            slices=F("slices") + 1,
            compute_allocated=F("compute_allocated") + ask.compute_pct,
            memory_allocated_mib=F("memory_allocated_mib") + ask.memory_mib,
        )
    )


class _Lost(Exception):
    """A racing transaction took a chosen card's capacity first."""


def _place_on(pool: Pool, ask: placement.Ask, lease: Lease, exclude: set[int]) -> list[Allocation]:
    """Place the ask's vGPUs in ``pool`` and record them on ``lease``; raises PlacementError."""
    for _attempt in range(PLACE_ATTEMPTS):
        cards = [c for c in pool_cards(pool, schedulable_only=True) if c.id not in exclude]
        chosen = placement.place(cards, ask)
        if chosen is None:
            break
        by_id = {c.id: c for c in cards}
        try:
            with transaction.atomic():
                made = []
                # Lock order by card id, so that two multi-card requests cannot deadlock.
                for gpu_id in sorted(chosen):
                    card = by_id[gpu_id]
                    if not _take({"pool": pool, "gpu_id": gpu_id}, card, ask):
                        raise _Lost
                    compute, memory = (100, card.memory_physical_mib) if ask.whole_card else (
                        ask.compute_pct, ask.memory_mib)  # fmt: skip
                    made.append(
                        Allocation(
                            lease=lease,
                            pool=pool,
                            gpu_id=gpu_id,
                            compute_pct=compute,
                            memory_mib=memory,
                            whole_card=ask.whole_card,
                            placed_at=timezone.now(),
                        )
                    )
                return Allocation.objects.bulk_create(made)
        except _Lost:
            continue
    all_cards = pool_cards(pool)
    if not placement.could_ever_fit(all_cards, ask):
        raise PlacementError("no card in this pool could ever hold this request", never=True)
    raise PlacementError("not enough free capacity in this pool now")


def ask_of(lease: Lease, pool: Pool) -> placement.Ask:
    return placement.Ask(
        count=lease.count, compute_pct=lease.compute_pct, memory_mib=lease.memory_mib,
        whole_card=lease.whole_card, model=lease.gpu_model, node=lease.node_name,
        node_labels=lease.node_labels or {}, same_node=lease.same_node, policy=pool.policy,
    )  # fmt: skip


def place_lease(
    pool: Pool, ask: placement.Ask, *, holder, unix_user: str, label: str = ""
) -> Lease:
    """Place ``ask`` in ``pool`` for ``holder``: a lease with one allocation per vGPU, all
    or nothing. Raises PlacementError (and changes nothing) when it does not fit."""
    ask = replace(ask, policy=pool.policy)
    with transaction.atomic():
        lease = Lease.objects.create(
            pool=pool,
            holder=holder,
            unix_user=unix_user,
            label=label[:200],
            count=ask.count,
            compute_pct=ask.compute_pct,
            memory_mib=ask.memory_mib,
            whole_card=ask.whole_card,
            gpu_model=ask.model,
            node_name=ask.node,
            node_labels=dict(ask.node_labels),
            same_node=ask.same_node,
        )
        allocations = _place_on(pool, ask, lease, exclude=set())
        notify_nodes(_nodes_of(allocations))
    return lease


def _nodes_of(allocations: Iterable[Allocation]) -> set[int]:
    gpu_ids = {a.gpu_id for a in allocations if a.gpu_id}
    return set(GPU.objects.filter(pk__in=gpu_ids).values_list("node_id", flat=True))


def _give_back(allocation: Allocation) -> None:
    """Return an active allocation's capacity to its card (caller holds the transaction)."""
    if allocation.state != AllocationState.ACTIVE or allocation.gpu_id is None:
        return
    rows = PoolCard.objects.filter(gpu_id=allocation.gpu_id, pool_id=allocation.pool_id)
    if allocation.whole_card:
        rows.update(held_whole=False, slices=0, compute_allocated=0, memory_allocated_mib=0)
    else:
        rows.update(
            slices=F("slices") - 1,
            compute_allocated=F("compute_allocated") - allocation.compute_pct,
            memory_allocated_mib=F("memory_allocated_mib") - allocation.memory_mib,
        )


def release_lease(lease_id: int) -> bool:
    """Release a lease and all its allocations; capacity returns at once. Idempotent:
    False when it was already released."""
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease_id)
        if lease.state == LeaseState.RELEASED:
            return False
        now = timezone.now()
        allocations = list(lease.allocations.exclude(state=AllocationState.RELEASED))
        for allocation in allocations:
            _give_back(allocation)
        nodes = _nodes_of(allocations)
        lease.allocations.exclude(state=AllocationState.RELEASED).update(
            state=AllocationState.RELEASED, released_at=now
        )
        lease.state, lease.released_at = LeaseState.RELEASED, now
        lease.save(update_fields=["state", "released_at"])
        notify_nodes(nodes)
    return True


def resize_lease(lease_id: int, *, compute_pct: int, memory_mib: int) -> Lease:
    """Change every slice of a lease in place when its cards have room, else raise
    PlacementError and change nothing. Whole-card leases cannot be resized."""
    if not 1 <= compute_pct <= 100 or memory_mib < 1:
        raise PlacementError("compute must be 1-100 % and memory at least 1 MiB", never=True)
    with transaction.atomic():
        lease = Lease.objects.select_for_update().get(pk=lease_id)
        if lease.state != LeaseState.ACTIVE or lease.whole_card:
            raise PlacementError("only an active, sliced lease can be resized", never=True)
        allocations = list(
            lease.allocations.filter(state=AllocationState.ACTIVE).select_related("gpu")
        )
        if any(a.gpu and a.gpu.memory_total_mib < memory_mib for a in allocations):
            raise PlacementError("a slice cannot be larger than its card", never=True)
        for allocation in sorted(allocations, key=lambda a: a.gpu_id or 0):
            dc, dm = compute_pct - allocation.compute_pct, memory_mib - allocation.memory_mib
            updated = PoolCard.objects.filter(
                gpu_id=allocation.gpu_id,
                pool_id=allocation.pool_id,
                compute_allocated__lte=F("compute_capacity") - dc,
                memory_allocated_mib__lte=F("memory_capacity_mib") - dm,
            ).update(
                compute_allocated=F("compute_allocated") + dc,
                memory_allocated_mib=F("memory_allocated_mib") + dm,
            )
            if not updated:
                raise PlacementError("a card of this lease has no room for the new size")
        lease.allocations.filter(state=AllocationState.ACTIVE).update(
            compute_pct=compute_pct, memory_mib=memory_mib
        )
        lease.compute_pct, lease.memory_mib = compute_pct, memory_mib
        lease.save(update_fields=["compute_pct", "memory_mib"])
        notify_nodes(_nodes_of(allocations))
    return lease


# --- pool membership ------------------------------------------------------------------


def matching_gpus(pool: Pool):
    """The cards the pool's rules match (whatever pool they are in now)."""
    gpus = GPU.objects.all()
    if pool.match_models:
        gpus = gpus.filter(model__in=pool.match_models)
    if pool.match_vendor:
        gpus = gpus.filter(vendor=pool.match_vendor)
    for key, value in (pool.match_labels or {}).items():
        gpus = gpus.filter(**{f"node__labels__{key}": value})
    return gpus


def _capacity_of(pool: Pool, physical_mib: int) -> dict:
    return {
        "compute_capacity": pool.compute_capacity(),
        "memory_capacity_mib": pool.memory_capacity(physical_mib),
    }


def add_cards(pool: Pool, gpu_ids: Iterable[int], *, by_hand: bool = True) -> int:
    """Put cards that are in no pool yet into ``pool``; returns how many joined."""
    gpus = GPU.objects.filter(pk__in=list(gpu_ids), pool_card__isnull=True)
    made = PoolCard.objects.bulk_create(
        [
            PoolCard(
                pool=pool,
                gpu=gpu,
                added_by_hand=by_hand,
                **_capacity_of(pool, gpu.memory_total_mib),
            )
            for gpu in gpus
        ],
        ignore_conflicts=True,  # a card another pool took meanwhile stays there
    )
    return len(made)


def refresh_cards(pool: Pool) -> int:
    """Bring the pool's rule-matched cards in step with its rules and its cards'
    capacity in step with its ratios; cards holding slices never leave. Returns how many
    joined."""
    with transaction.atomic():
        joined = 0
        if pool.match_by_rules:
            joined = add_cards(
                pool,
                matching_gpus(pool).filter(pool_card__isnull=True).values_list("pk", flat=True),
                by_hand=False,
            )
            pool.cards.filter(added_by_hand=False, slices=0).exclude(
                gpu__in=matching_gpus(pool)
            ).delete()
        for card in pool.cards.select_related("gpu").select_for_update(of=("self",)):
            wanted = _capacity_of(pool, card.gpu.memory_total_mib)
            if any(getattr(card, k) != v for k, v in wanted.items()):
                PoolCard.objects.filter(pk=card.pk).update(**wanted)
    return joined
