"""Placement: which cards take a request's vGPUs. A pure function over plain data.

No ORM and no Django here (DESIGN.md decision 7), so hypothesis can test it. The
allocation service (``pools.services.picks``) reads the candidate cards that fit in SQL,
calls ``place`` on them and then takes the capacity in one statement
(``pools.lease_sql``); bench/placement times that whole path against PostgreSQL.

Units: compute in percent points of one card (a card has ``100 x compute ratio``),
memory in MiB (``physical x memory ratio``). Each vGPU of a request goes to a different
card; a slice is never larger than one physical card (100 %, its physical memory).

Order. A card's *free share* is the smaller of its free compute and free memory, each as
a share of its capacity: the largest slice "of the card's own shape" still free on it.
Binpack takes the card with the smallest free share that fits (ties: the smaller sum of
both shares, then the lower id); empty cards come last, so a partly used card that fits is
always filled before an empty one is opened, and the card with the largest free share is
only touched when nothing else fits: the largest slice that fits stays large. Spread takes
the opposite order (empty cards first) and, across nodes, one card per node per round.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

BINPACK = "binpack"
SPREAD = "spread"
MAX_COMPUTE_PCT = 100  # one physical card


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
    vendor: str = "nvidia"

    @property
    def compute_free(self) -> int:
        return self.compute_capacity - self.compute_used

    @property
    def memory_free_mib(self) -> int:
        return self.memory_capacity_mib - self.memory_used_mib


def share_pct(whole_card: bool, compute_pct: int) -> int:
    """The card percent one vGPU holds: a whole card all of it (100), a slice its own
    compute. Quotas, GPU-hours, reports and placement all count a vGPU this way."""
    return MAX_COMPUTE_PCT if whole_card else compute_pct


@dataclass(frozen=True, slots=True)
class Ask:
    count: int = 1
    compute_pct: int = 100  # per vGPU, 1..100; ignored for whole cards
    memory_mib: int = 0  # per vGPU; ignored for whole cards
    whole_card: bool = False
    model: str = ""  # "" = any
    node: str = ""  # a node's name, "" = any
    vendor: str = ""  # "" = any (agents.choices.GpuVendor)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    same_node: bool = False
    policy: str = BINPACK

    def take(self, card: Card) -> tuple[int, int]:
        """(compute, memory) this ask takes from ``card`` per vGPU."""
        if self.whole_card:
            return card.compute_capacity, card.memory_capacity_mib
        return self.compute_pct, self.memory_mib

    @classmethod
    def of(cls, spec, policy: str = BINPACK) -> Ask:
        """The ask of a GPU request or a lease (both carry the same fields): a whole card
        asks for all of the card, 100 % and its memory once known (0 until placed)."""
        return cls(
            count=spec.count, compute_pct=share_pct(spec.whole_card, spec.compute_pct),
            memory_mib=0 if spec.whole_card else spec.memory_mib, whole_card=spec.whole_card,
            model=spec.gpu_model, node=spec.node_name, node_labels=spec.node_labels or {},
            same_node=spec.same_node, policy=policy,
            vendor=getattr(spec, "gpu_vendor", ""),  # a spec from before vendors: any
        )  # fmt: skip

    @property
    def valid(self) -> bool:
        if self.count < 1:
            return False
        return self.whole_card or (
            1 <= self.compute_pct <= MAX_COMPUTE_PCT and self.memory_mib >= 0
        )


def matches(card: Card, ask: Ask) -> bool:
    """The ask's constraints, capacity aside."""
    if ask.model and card.model != ask.model:
        return False
    if ask.vendor and card.vendor != ask.vendor:
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
    return ask.compute_pct <= min(MAX_COMPUTE_PCT, card.compute_free) and ask.memory_mib <= min(
        card.memory_physical_mib, card.memory_free_mib
    )


def fits_empty(card: Card, ask: Ask) -> bool:
    """Whether one vGPU of ``ask`` would fit on ``card`` were it empty (and healthy)."""
    if ask.whole_card:
        return True
    return ask.compute_pct <= min(MAX_COMPUTE_PCT, card.compute_capacity) and (
        ask.memory_mib <= min(card.memory_physical_mib, card.memory_capacity_mib)
    )


def could_ever_fit(cards: Iterable[Card], ask: Ask) -> bool:
    """Whether the pool could hold the ask were it empty: a request that never could is
    refused at once ("larger than any card"), one that could waits in the queue."""
    if not ask.valid:
        return False
    eligible = [c for c in cards if matches(c, ask) and fits_empty(c, ask)]
    if ask.same_node:
        per_node: dict[int, int] = defaultdict(int)
        for card in eligible:
            per_node[card.node_id] += 1
        return any(n >= ask.count for n in per_node.values())
    return len(eligible) >= ask.count


def _share(free: int, capacity: int) -> float:
    return free / capacity if capacity > 0 else 0.0


def free_share(card: Card) -> float:
    """The card's free share: the smaller of its free compute and memory shares (0..1)."""
    return min(
        _share(card.compute_free, card.compute_capacity),
        _share(card.memory_free_mib, card.memory_capacity_mib),
    )


def binpack_key(card: Card) -> tuple[bool, float, float, int]:
    """Binpack's order, best first: partly used cards before empty ones, the smallest free
    share first, then the smaller sum of both free shares, then the lower id."""
    compute = _share(card.compute_free, card.compute_capacity)
    memory = _share(card.memory_free_mib, card.memory_capacity_mib)
    return (card.slices == 0, min(compute, memory), compute + memory, card.id)


def spread_key(card: Card) -> tuple[bool, float, float, int]:
    """Spread's order, best first: binpack's reversed (ties: the higher id first)."""
    empty, share, total, card_id = binpack_key(card)
    return (not empty, -share, -total, -card_id)


def key_of(policy: str):
    return spread_key if policy == SPREAD else binpack_key


def place(cards: Sequence[Card], ask: Ask) -> tuple[int, ...] | None:
    """The ids of ``ask.count`` distinct cards that take the ask, or None when it does not
    fit now. All or nothing; deterministic for the same input (whatever its order)."""
    if not ask.valid:
        return None
    return choose([c for c in cards if matches(c, ask) and fits(c, ask)], ask)


def choose(candidates: Sequence[Card], ask: Ask) -> tuple[int, ...] | None:
    """``place`` once the candidates (cards that match and fit) are known."""
    if len(candidates) < ask.count:
        return None
    key = key_of(ask.policy)
    ordered = sorted(candidates, key=key)
    if ask.same_node:
        return _one_node(ordered, ask, key)
    if ask.policy == SPREAD:
        return round_robin(ordered, ask.count)
    return tuple(card.id for card in ordered[: ask.count])


def round_robin(ordered: Iterable[Card], count: int) -> tuple[int, ...] | None:
    """Spread over nodes: in order, each round takes at most one card of each node; cards
    of a node already used this round wait for the next."""
    chosen: list[int] = []
    waiting: list[Card] = []
    used: set[int] = set()
    for card in ordered:
        if card.node_id in used:
            waiting.append(card)
            continue
        used.add(card.node_id)
        chosen.append(card.id)
        if len(chosen) == count:
            return tuple(chosen)
    while waiting:
        rest, waiting, used = waiting, [], set()
        for card in rest:
            if card.node_id in used:
                waiting.append(card)
                continue
            used.add(card.node_id)
            chosen.append(card.id)
            if len(chosen) == count:
                return tuple(chosen)
    return None


def _one_node(ordered: list[Card], ask: Ask, key) -> tuple[int, ...] | None:
    """All vGPUs on one node: each node offers its best ``count`` cards. Binpack takes the
    node that opens the fewest empty cards; then (spread: only) the node whose worst
    offered card comes first in the policy's order."""
    per_node: dict[int, list[Card]] = defaultdict(list)
    for card in ordered:
        if len(per_node[card.node_id]) < ask.count:
            per_node[card.node_id].append(card)
    best: tuple | None = None
    for cards in per_node.values():
        if len(cards) < ask.count:
            continue
        keys = [key(card) for card in cards]
        node_key = (sum(k[0] for k in keys) if ask.policy != SPREAD else 0, keys[-1])
        if best is None or node_key < best[0]:
            best = (node_key, tuple(card.id for card in cards))
    return best[1] if best else None
