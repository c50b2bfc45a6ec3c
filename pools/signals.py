"""What pools tells other apps and its own agent sync, always after commit."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction
from django.dispatch import Signal

# Sent with ``node_ids`` (a frozenset) after a transaction that changed the slices placed
# on those nodes commits: their agents must get their desired state again.
desired_state_changed = Signal()


def notify_nodes(node_ids: Iterable[int]) -> None:
    ids = frozenset(node_ids)
    if ids:
        transaction.on_commit(lambda: desired_state_changed.send_robust(sender=None, node_ids=ids))


@dataclass(frozen=True, slots=True)
class AllocationMove:
    """One slice that left its card: moved to ``to_gpu_id``, or stranded when that is
    None (kept, capacity released, re-tried later). Cards are GPU ids."""

    lease_id: int
    allocation_id: int
    from_gpu_id: int | None
    to_gpu_id: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class CardCordon:
    """A card that takes no new slices until an admin clears it; its slices stay."""

    pool_card_id: int
    gpu_id: int
    reason: str
    lease_ids: tuple[int, ...]  # the leases holding slices on it


# Sent with ``moves`` (a tuple of AllocationMove) after the transaction that moved or
# stranded them commits: the apps above tell the leases' holders.
allocations_moved = Signal()
# Sent with ``cordon`` (a CardCordon) after a card is cordoned.
card_cordoned = Signal()


def announce_moves(moves: Iterable[AllocationMove]) -> None:
    moves = tuple(moves)
    if moves:
        transaction.on_commit(lambda: allocations_moved.send_robust(sender=None, moves=moves))


def announce_cordon(cordon: CardCordon) -> None:
    transaction.on_commit(lambda: card_cordoned.send_robust(sender=None, cordon=cordon))
