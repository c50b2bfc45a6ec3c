"""What-if placement: which leases would have to be released for an ask to fit now.

The reports' take-back of borrowed capacity asks it before warning anyone, so that no
more leases are taken back than the waiting request needs. Two queries (the pool's cards,
the candidates' live allocations); the rest is placement's pure function.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from pools import placement
from pools.choices import AllocationState
from pools.models import Allocation, Pool
from pools.services import pool_cards


def _freed(cards: dict[int, placement.Card], held: list[tuple], lease_ids: set[int]) -> list:
    """The cards as they would be were ``lease_ids`` released (as pools.lease_sql.release
    gives capacity back: a whole card empties, a slice returns its share)."""
    back: dict[int, list[tuple]] = defaultdict(list)
    for lease_id, gpu_id, compute, memory, whole in held:
        if lease_id in lease_ids:
            back[gpu_id].append((compute, memory, whole))
    out = []
    for gpu_id, card in cards.items():
        given = back.get(gpu_id)
        if given and any(whole for _c, _m, whole in given):
            card = replace(card, compute_used=0, memory_used_mib=0, slices=0, held_whole=False)
        elif given:
            card = replace(
                card,
                compute_used=card.compute_used - sum(c for c, _m, _w in given),
                memory_used_mib=card.memory_used_mib - sum(m for _c, m, _w in given),
                slices=card.slices - len(given),
            )
        out.append(card)
    return out


def release_plan(
    pool: Pool, ask: placement.Ask, candidates: Sequence[int], already: Iterable[int] = ()
) -> list[int] | None:
    """The leases of ``candidates`` (tried in the order given) whose release, with that of
    ``already``, lets ``ask`` be placed in ``pool`` now: [] when it fits without them,
    None when even all of them would not do. None of the chosen is superfluous: each one
    left out would leave the ask unplaced."""
    ask = replace(ask, policy=pool.policy)
    already = set(already)
    cards = {card.id: card for card in pool_cards(pool)}
    held = list(
        Allocation.objects.filter(
            lease_id__in=already | set(candidates), state=AllocationState.ACTIVE,
            gpu__isnull=False, pool=pool,
        ).values_list("lease_id", "gpu_id", "compute_pct", "memory_mib", "whole_card")
    )  # fmt: skip

    def fits(lease_ids: set[int]) -> bool:
        return placement.place(_freed(cards, held, lease_ids), ask) is not None

    if fits(already):
        return []
    chosen: list[int] = []
    for lease_id in candidates:
        chosen.append(lease_id)
        if fits(already | set(chosen)):
            break
    else:
        return None
    # The last one was needed; drop any earlier one the rest can do without.
    for lease_id in list(chosen[:-1]):
        rest = already | (set(chosen) - {lease_id})
        if fits(rest):
            chosen.remove(lease_id)
    return chosen
