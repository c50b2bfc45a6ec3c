"""Drain, failure and cordon: slices leave cards that cannot hold them any more.

A slice whose card is lost, deleted, or on a node drained or offline past
``POOLS_OFFLINE_GRACE_S`` is re-placed alike (same size, same lease) on a healthy card
of its pool; capacity moves in one transaction with the allocation service's
conditional updates. One that fits nowhere becomes STRANDED: its capacity is given
back, it is kept and shown, never deleted, and tried again by the beat task. A move or
a strand keeps the allocation's id; the stretch it held on the old card is kept as an
``AllocationSpan`` (GPU-hours, quotas and per-card history count it there), and its
``placed_at`` becomes the move's time (None while stranded: it holds nothing). A card
with a critical XID or new uncorrectable ECC errors is cordoned (no new slices) until an
admin clears it. Owners are told through ``pools.signals`` after commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.choices import GpuHealth, NodeState
from agents.models import GPU, Node
from audit.interface import record
from pools import lease_sql
from pools.choices import AgentSync, AllocationState, LeaseState
from pools.models import Allocation, AllocationSpan, PoolCard
from pools.placement import Ask
from pools.services import give_back, notify_nodes, picks
from pools.signals import AllocationMove, CardCordon, announce_cordon, announce_moves

logger = logging.getLogger(__name__)

REASON_CHARS = 255


@dataclass
class FailoverResult:
    moved: list[AllocationMove]
    stranded: list[AllocationMove]


def _choose(allocation: Allocation, exclude: set[int]) -> tuple[int, int, int] | None:
    """Take one vGPU of the allocation's lease on a healthy card of its pool (not one of
    ``exclude``), through the allocation service's own statements; returns (gpu id, node
    id, physical MiB) of the card taken, or None."""
    lease, pool = allocation.lease, allocation.pool
    ask = replace(Ask.of(lease, pool.policy), count=1, same_node=False)
    if lease.same_node:
        # The lease's other slices that stay (healthy card, online node) fix the node.
        sibling = (
            lease.allocations.filter(
                state=AllocationState.ACTIVE, gpu__health=GpuHealth.OK,
                gpu__node__state=NodeState.ONLINE,
            )
            .exclude(pk=allocation.pk)
            .values_list("gpu__node__name", flat=True)
            .first()
        )  # fmt: skip
        if sibling:
            ask = replace(ask, node=sibling)
    for pick, params, count in picks(pool, ask, exclude):
        if taken := lease_sql.take(
            pick, params, count, ask.whole_card, ask.compute_pct, ask.memory_mib
        ):
            return taken[0]
    return None


def replace_allocation(allocation_id: int, reason: str, *, actor=None) -> AllocationMove | None:
    """Move one active or stranded allocation to a healthy card of its pool, or strand it
    (capacity given back). None when it is no longer held. Audited; owners told."""
    reason = reason[:REASON_CHARS]
    with transaction.atomic():
        allocation = (
            Allocation.objects.select_for_update(of=("self",))
            .select_related("lease", "pool", "gpu")
            .filter(pk=allocation_id)
            .first()
        )
        if allocation is None or allocation.state == AllocationState.RELEASED:
            return None
        if allocation.lease.state != LeaseState.ACTIVE:
            return None
        before = {"gpu": allocation.gpu_id, "state": allocation.state}
        siblings = set(
            allocation.lease.allocations.filter(state=AllocationState.ACTIVE)
            .exclude(pk=allocation.pk)
            .values_list("gpu_id", flat=True)
        )
        old_gpu, old_node = allocation.gpu_id, allocation.gpu.node_id if allocation.gpu else None
        taken = _choose(allocation, {g for g in siblings if g} | ({old_gpu} if old_gpu else set()))
        if allocation.state == AllocationState.ACTIVE:  # a stranded one holds nothing
            give_back(
                allocation.gpu_id, allocation.pool_id, allocation.compute_pct,
                allocation.memory_mib, allocation.whole_card,
            )  # fmt: skip
        now = timezone.now()
        # The time on the old card stays counted (and attributed to that card); the row
        # goes on from now, on its new card, or holds nothing while stranded.
        AllocationSpan.close(allocation, now, "moved" if taken is not None else "stranded")
        if taken is not None:
            gpu_id, _, physical = taken
            allocation.gpu_id, allocation.stranded_reason = gpu_id, ""
            allocation.state = AllocationState.ACTIVE
            if allocation.whole_card:
                allocation.compute_pct, allocation.memory_mib = 100, physical
            allocation.placed_at = now
            action = "allocation.moved"
        else:
            allocation.state, allocation.stranded_reason = AllocationState.STRANDED, reason
            allocation.placed_at = None
            action = "allocation.stranded"
        allocation.agent_sync, allocation.agent_error, allocation.agent_attempts = (
            AgentSync.PENDING, "", 0)  # fmt: skip
        allocation.save()
        move = AllocationMove(
            lease_id=allocation.lease_id, allocation_id=allocation.pk, from_gpu_id=old_gpu,
            to_gpu_id=taken[0] if taken else None, reason=reason,
        )  # fmt: skip
        record(
            action, allocation, actor=actor, message=reason,
            before=before, after={"gpu": allocation.gpu_id, "state": allocation.state},
        )  # fmt: skip
        nodes = {old_node} if old_node else set()
        if taken is not None:
            nodes.add(taken[1])
        notify_nodes(nodes)
        announce_moves([move])
    return move


def move_allocation(
    allocation_id: int, gpu_id: int, reason: str, *, actor=None, why: list[str] | None = None
) -> AllocationMove | None:
    """Move one active allocation to the card ``gpu_id`` of its pool, where something the
    portal does not run placed it (a cluster's scheduler): the capacity is taken there by
    the allocation service's conditional statements and given back on its old card, in one
    transaction. None, and nothing changed, when it cannot: not active, already there, the
    card not of its pool or holding another slice of the lease, or no room there in the
    portal's books (full, held whole, cordoned), or the card not healthy or its node not
    online (as failover's own choice: a card failover moved it off is not a target). Why
    the card was refused, in words, is appended to ``why``. Audited; owners told."""
    reason = reason[:REASON_CHARS]
    with transaction.atomic():
        allocation = (
            Allocation.objects.select_for_update(of=("self",))
            .select_related("lease", "gpu")
            .filter(pk=allocation_id)
            .first()
        )
        if (
            allocation is None or allocation.state != AllocationState.ACTIVE
            or allocation.lease.state != LeaseState.ACTIVE or allocation.gpu_id == gpu_id
            or allocation.lease.allocations.filter(state=AllocationState.ACTIVE, gpu_id=gpu_id)
            .exists()
        ):  # fmt: skip
            return None
        whole, compute, memory = (
            allocation.whole_card, allocation.compute_pct, allocation.memory_mib)  # fmt: skip
        card = GPU.objects.filter(pk=gpu_id).values("health", "node__state").first()
        cordoned = PoolCard.objects.filter(
            pool_id=allocation.pool_id, gpu_id=gpu_id, cordoned_at__isnull=False
        ).exists()
        refusal = (
            _("not healthy") if card and card["health"] != GpuHealth.OK
            else _("its node offline") if card and card["node__state"] != NodeState.ONLINE
            else _("cordoned") if cordoned
            else ""
        )  # fmt: skip
        taken = None
        if not refusal:
            pick, params = lease_sql.lock_chosen(
                allocation.pool_id, [gpu_id], whole, compute, memory
            )
            taken = lease_sql.take(pick, params, 1, whole, compute, memory)
        if not taken:
            if why is not None:
                why.append(refusal or _("full in the portal's books"))
            return None
        _gpu, new_node, physical = taken[0]
        old_gpu, old_node = allocation.gpu_id, allocation.gpu.node_id if allocation.gpu else None
        give_back(old_gpu, allocation.pool_id, compute, memory, whole)
        now = timezone.now()
        AllocationSpan.close(allocation, now, "moved")
        allocation.gpu_id, allocation.placed_at = gpu_id, now
        if whole:
            allocation.compute_pct, allocation.memory_mib = 100, physical
        allocation.agent_sync, allocation.agent_error, allocation.agent_attempts = (
            AgentSync.PENDING, "", 0)  # fmt: skip
        allocation.save()
        move = AllocationMove(lease_id=allocation.lease_id, allocation_id=allocation.pk,
                              from_gpu_id=old_gpu, to_gpu_id=gpu_id, reason=reason)  # fmt: skip
        record("allocation.moved", allocation, actor=actor, message=reason,
               before={"gpu": old_gpu}, after={"gpu": gpu_id})  # fmt: skip
        notify_nodes({n for n in (old_node, new_node) if n})
        announce_moves([move])
    return move


def _move_all(allocation_ids: list[int], reason: str, actor=None) -> FailoverResult:
    result = FailoverResult([], [])
    for allocation_id in allocation_ids:
        move = replace_allocation(allocation_id, reason, actor=actor)
        if move is not None:
            (result.moved if move.to_gpu_id else result.stranded).append(move)
    return result


def _active(**filters) -> list[int]:
    return list(
        Allocation.objects.filter(state=AllocationState.ACTIVE, **filters)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def move_failed(node_ids: list[int] | None = None) -> FailoverResult:
    """Re-place the active slices whose card is lost, deleted or out of its pool, or whose
    node is draining (set by hand, or a drain cut short) or offline past the grace period.
    With ``node_ids``, only slices on those nodes (deleted cards have no node)."""
    result = FailoverResult([], [])
    scope = {"gpu__node_id__in": node_ids} if node_ids is not None else {}
    grace = timezone.now() - timedelta(seconds=settings.POOLS_OFFLINE_GRACE_S)
    causes = [
        ("card lost", _active(gpu__health=GpuHealth.LOST, **scope)),
        ("node drained", _active(gpu__node__state=NodeState.DRAINING, **scope)),
        (
            "node offline past the grace period",
            list(
                Allocation.objects.filter(
                    state=AllocationState.ACTIVE, gpu__node__state=NodeState.OFFLINE, **scope
                )
                .filter(Q(gpu__node__last_seen__lt=grace) | Q(gpu__node__last_seen=None))
                .values_list("pk", flat=True)
            ),
        ),
    ]
    if node_ids is None:
        causes.append(("card deleted", _active(gpu=None)))
        causes.append(("card left its pool", _off_pool()))
    for reason, ids in causes:
        part = _move_all(ids, reason)
        result.moved += part.moved
        result.stranded += part.stranded
    return result


def _off_pool() -> list[int]:
    """Active slices on a card that is no longer a card of their pool."""
    return list(
        Allocation.objects.filter(state=AllocationState.ACTIVE, gpu__isnull=False)
        .exclude(gpu__pool_card__pool_id=F("pool_id"))
        .values_list("pk", flat=True)
    )


def retry_stranded() -> FailoverResult:
    """Try the stranded slices of active leases again (capacity may have come back)."""
    ids = list(
        Allocation.objects.filter(state=AllocationState.STRANDED, lease__state=LeaseState.ACTIVE)
        .order_by("pk")
        .values_list("pk", "stranded_reason")
    )
    result = FailoverResult([], [])
    for pk, reason in ids:
        with transaction.atomic():
            # A retry that strands again changes nothing: kept in a savepoint we undo.
            move = replace_allocation(pk, reason or "re-placement")
            if move is not None and move.to_gpu_id is None:
                transaction.set_rollback(True)
                continue
        if move is not None:
            result.moved.append(move)
    return result


def drain_node(node: Node, actor=None, *, address: str | None = None) -> FailoverResult:
    """Put a node in DRAINING (no new slices; polling keeps the state) and move its slices
    to healthy cards of their pools; what fits nowhere is stranded."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state != NodeState.DRAINING:
            before = {"state": locked.state}
            Node.objects.filter(pk=node.pk).update(state=NodeState.DRAINING)
            record(
                "node.drained", locked, actor=actor, address=address,
                before=before, after={"state": NodeState.DRAINING},
            )  # fmt: skip
    node.state = NodeState.DRAINING
    return _move_all(_active(gpu__node_id=node.pk), "node drained", actor)


def undrain_node(node: Node, actor=None, *, address: str | None = None) -> bool:
    """End a drain: the node is online again (the next poll sets what it really is) and
    takes new slices. Slices moved away stay where they went. False when it was not
    draining (nothing changes)."""
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        if locked.state != NodeState.DRAINING:
            return False
        Node.objects.filter(pk=node.pk).update(state=NodeState.ONLINE)
        record(
            "node.undrained", locked, actor=actor, address=address,
            before={"state": NodeState.DRAINING}, after={"state": NodeState.ONLINE},
        )  # fmt: skip
    node.state = NodeState.ONLINE
    return True


def cordon_card(card_id: int, reason: str, *, actor=None, address: str | None = None) -> bool:
    """Cordon a pool card (no new slices); False when it already was. Owners told."""
    with transaction.atomic():
        card = PoolCard.objects.select_for_update().filter(pk=card_id).first()
        if card is None or card.cordoned_at is not None:
            return False
        card.cordoned_at, card.cordon_reason = timezone.now(), reason[:REASON_CHARS]
        card.save(update_fields=["cordoned_at", "cordon_reason"])
        record(
            "pool_card.cordoned", card, actor=actor, address=address, message=card.cordon_reason,
            after={"cordoned_at": card.cordoned_at, "cordon_reason": card.cordon_reason},
        )  # fmt: skip
        leases = sorted(
            set(
                Allocation.objects.filter(
                    gpu_id=card.gpu_id, state=AllocationState.ACTIVE
                ).values_list("lease_id", flat=True)
            )
        )
        announce_cordon(CardCordon(card.pk, card.gpu_id, card.cordon_reason, tuple(leases)))
    return True


def clear_cordon(card: PoolCard, actor, *, address: str | None = None) -> bool:
    """An admin clears a cordon: the card takes new slices again. False when it was not
    cordoned (nothing changes)."""
    with transaction.atomic():
        locked = PoolCard.objects.select_for_update().get(pk=card.pk)
        if locked.cordoned_at is None:
            return False
        before = {"cordoned_at": locked.cordoned_at, "cordon_reason": locked.cordon_reason}
        locked.cordoned_at, locked.cordon_reason = None, ""
        locked.save(update_fields=["cordoned_at", "cordon_reason"])
        record(
            "pool_card.cordon_cleared", locked, actor=actor, address=address,
            before=before, after={"cordoned_at": None, "cordon_reason": ""},
        )  # fmt: skip
    card.cordoned_at, card.cordon_reason = None, ""
    return True


def apply_marks(marks: dict[int, dict[str, int]]) -> None:
    """Store the fault counters last read per card (see agent_reports._faults)."""
    for pk, values in marks.items():
        PoolCard.objects.filter(pk=pk).update(fault_marks=values)
