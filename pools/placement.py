"""Placement: which cards take a request's vGPUs. A pure function over plain data.

No ORM and no Django here (DESIGN.md decision 7), so hypothesis can test it and
bench/placement can time it at 10,000 cards. The allocation service (``pools.services``)
reads the cards, calls ``place`` and then takes the capacity with conditional UPDATEs.

Units: compute in percent points of one card (a card has ``100 x compute ratio``),
memory in MiB (``physical x memory ratio``). Each vGPU of a request goes to a different
card; a slice is never larger than one physical card (100 %, its physical memory).
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

BINPACK = "binpack"
SPREAD = "spread"


@dataclass(frozen=True, slots=True)
class Card:
    id: int
    node_id: int
    node_name: str
    model: str
    compute_capacity: int  # percent points, oversubscription included
    memory_capacity_mib: int  # MiB, oversubscription included
    memory_physical_mib: int
    compute_used: int = 0
    memory_used_mib: int = 0
    slices: int = 0
    held_whole: bool = False
    schedulable: bool = True  # False: cordoned, lost, or its node draining or offline
    node_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def compute_free(self) -> int:
        return self.compute_capacity - self.compute_used

    @property
    def memory_free_mib(self) -> int:
        return self.memory_capacity_mib - self.memory_used_mib


@dataclass(frozen=True, slots=True)
class Ask:
    count: int = 1
    compute_pct: int = 100  # per vGPU, 1..100; ignored for whole cards
    memory_mib: int = 0  # per vGPU; ignored for whole cards
    whole_card: bool = False
    model: str = ""  # "" = any
    node: str = ""  # a node's name, "" = any
    node_labels: Mapping[str, str] = field(default_factory=dict)
    same_node: bool = False
    policy: str = BINPACK

    def take(self, card: Card) -> tuple[int, int]:
        """(compute, memory) this ask takes from ``card`` per vGPU."""
        if self.whole_card:
            return card.compute_capacity, card.memory_capacity_mib
        return self.compute_pct, self.memory_mib


def matches(card: Card, ask: Ask) -> bool:
    """The ask's constraints, capacity aside."""
    if ask.model and card.model != ask.model:
        return False
    if ask.node and card.node_name != ask.node:
        return False
    return all(card.node_labels.get(k) == v for k, v in ask.node_labels.items())


def fits(card: Card, ask: Ask) -> bool:
    """Whether one vGPU of ``ask`` fits on ``card`` now."""
    if not card.schedulable or card.held_whole:
        return False
    if ask.whole_card:
        return card.slices == 0
    return ask.compute_pct <= min(100, card.compute_free) and ask.memory_mib <= min(
        card.memory_physical_mib, card.memory_free_mib
    )


def fits_empty(card: Card, ask: Ask) -> bool:
    """Whether one vGPU of ``ask`` would fit on ``card`` were it empty (and healthy)."""
    if ask.whole_card:
        return True
    return ask.compute_pct <= min(100, card.compute_capacity) and ask.memory_mib <= min(
        card.memory_physical_mib, card.memory_capacity_mib
    )


def could_ever_fit(cards: Iterable[Card], ask: Ask) -> bool:
    """Whether the pool could hold the ask were it empty: a request that never could is
    refused at once ("larger than any card"), one that could waits in the queue."""
    eligible = [c for c in cards if matches(c, ask) and fits_empty(c, ask)]
    if ask.same_node:
        per_node: dict[int, int] = defaultdict(int)
        for card in eligible:
            per_node[card.node_id] += 1
        return any(n >= ask.count for n in per_node.values())
    return len(eligible) >= ask.count


def _leftover(card: Card, ask: Ask) -> float:
    """How much of the card stays free after one vGPU, as a share of its capacity
    (compute and memory together): binpack takes the least, spread the most."""
    compute, memory = ask.take(card)
    free_compute = (card.compute_free - compute) / card.compute_capacity
    free_memory = (card.memory_free_mib - memory) / max(card.memory_capacity_mib, 1)
    return free_compute + free_memory


def place(cards: Sequence[Card], ask: Ask) -> tuple[int, ...] | None:
    """The ids of ``ask.count`` distinct cards that take the ask, or None when it does not
    fit now. All or nothing; deterministic for the same input.

    Binpack chooses the best fit (the card left fullest), so the largest free slices stay
    large; spread chooses the emptiest cards and, across nodes, one node after another.
    """
    if ask.count < 1:
        return None
    candidates = [c for c in cards if matches(c, ask) and fits(c, ask)]
    if len(candidates) < ask.count:
        return None
    spread = ask.policy == SPREAD
    # Sort key: binpack ascending leftover, spread descending; card id breaks ties.
    scored = [((-s if spread else s), c.id, c) for c in candidates if (s := _leftover(c, ask)) >= 0]
    if ask.same_node:
        return _one_node(scored, ask.count, spread)
    if spread:
        return _across_nodes(scored, ask.count)
    return tuple(card.id for _, _, card in heapq.nsmallest(ask.count, scored))


def _one_node(scored: list, count: int, spread: bool) -> tuple[int, ...] | None:
    per_node: dict[int, list] = defaultdict(list)
    for item in scored:
        per_node[item[2].node_id].append(item)
    best: tuple[float, int, tuple[int, ...]] | None = None
    for node_id, items in per_node.items():
        if len(items) < count:
            continue
        chosen = heapq.nsmallest(count, items)
        total = sum(score for score, _, _ in chosen)
        key = (total, node_id, tuple(card.id for _, _, card in chosen))
        if best is None or key < best:
            best = key
    return best[2] if best else None


def _across_nodes(scored: list, count: int) -> tuple[int, ...]:
    """Spread over nodes: each round takes the best card of each node, emptiest nodes first."""
    per_node: dict[int, list] = defaultdict(list)
    for item in sorted(scored):
        per_node[item[2].node_id].append(item)
    queues = sorted(per_node.values(), key=lambda items: items[0][:2])
    chosen: list[int] = []
    depth = 0
    while len(chosen) < count:
        for items in queues:
            if depth < len(items):
                chosen.append(items[depth][2].id)
                if len(chosen) == count:
                    break
        depth += 1
    return tuple(chosen)
