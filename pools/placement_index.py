"""The cards of a pool kept in placement's order, so that a placement reads a few cards,
not all of them: ``CardIndex.place(ask)`` answers exactly what ``placement.place(cards,
ask)`` answers (tests/test_placement.py proves it), at 10,000 cards in well under 1 ms.

Cards are grouped by *shape* (model and capacities) and, inside a shape, by free compute:
one bucket per free compute value, sorted by free memory. Inside a bucket both placement
orders follow free memory, so the cards of a bucket that fit an ask are one run found by
bisection, already in order; the buckets' runs are merged lazily and only as many cards
are read as the ask needs. Empty cards are kept apart (they come last in binpack, first in
spread). Cards that cannot take anything now (held whole, cordoned, down) are not indexed.

Asks for several vGPUs on one node are answered node by node instead: each node keeps its
indexed cards in binpack's order, and for each count k the nodes are ranked by a bound
their k-th card sets on what they can offer (``_node_ranks``); a placement walks the nodes
in that rank, skips at once those whose k largest free compute or memory values are too
small, and stops when no node left can beat the best offer found.
Pure, like placement: no Django.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections import defaultdict
from collections.abc import Iterable, Iterator

from pools.placement import (
    MAX_COMPUTE_PCT,
    SPREAD,
    Ask,
    Card,
    binpack_key,
    choose,
    fits,
    key_of,
    matches,
    round_robin,
    spread_key,
)

Shape = tuple[str, int, int, int]  # model, compute capacity, memory capacity, physical memory

# Size classes of one-node binpack asks: an ask is ranked with the largest class at or
# below its compute and memory, among the cards with at least that much free.
CLASS_COMPUTE = (1, 10, 25, 50)  # percent points
CLASS_MEMORY = (0, 4096, 16384)  # MiB


def _size_class(ask: Ask) -> tuple[int, int]:
    if ask.whole_card:
        return CLASS_COMPUTE[0], CLASS_MEMORY[0]
    compute = CLASS_COMPUTE[bisect_right(CLASS_COMPUTE, ask.compute_pct) - 1]
    return compute, CLASS_MEMORY[bisect_right(CLASS_MEMORY, ask.memory_mib) - 1]


class _Node:
    """One node's indexed cards in binpack's order, and what bounds their offers."""

    __slots__ = ("cards", "compute", "empty", "entries", "memory", "partly")

    def __init__(self) -> None:
        self.cards: list[tuple[tuple, Card]] = []  # (binpack key, card), best first
        self.compute: list[int] = []  # partly used cards' free compute (at most 100), negated
        self.memory: list[int] = []  # their free memory (at most physical), negated
        self.partly = self.empty = 0
        self.entries: dict[tuple, tuple] = {}  # rank -> this node's entry in it

    def refresh(self, cards: Iterable[Card]) -> None:
        self.cards = sorted(((binpack_key(c), c) for c in cards), key=lambda kc: kc[0])
        partly = [c for _, c in self.cards if c.slices]
        # negated, ascending: bisect counts the cards with at least so much free
        self.compute = sorted(-min(MAX_COMPUTE_PCT, c.compute_free) for c in partly)
        self.memory = sorted(-min(c.memory_physical_mib, c.memory_free_mib) for c in partly)
        self.partly, self.empty = len(partly), len(self.cards) - len(partly)

    def ranked(self, node_id: int) -> dict[tuple, tuple]:
        """This node's entries in the ranks. An offer of k cards ends with a card no better
        than the k-th of those that could fit, in the policy's order, and binpack's offer
        opens at least k minus the partly used ones among them empty cards: the bound.
        Spread ranks by all indexed cards (empty ones, first in its order, fit most asks);
        binpack by the cards of each size class."""
        cards, entries = self.cards, {}
        for k in range(1, len(cards) + 1):
            entries[(SPREAD, k)] = (0, *spread_key(cards[-k][1]), node_id)
        free = [
            (min(MAX_COMPUTE_PCT, c.compute_free), min(c.memory_physical_mib, c.memory_free_mib),
             key, c.slices > 0)
            for key, c in cards
        ]  # fmt: skip
        for compute in CLASS_COMPUTE:
            free = [f for f in free if f[0] >= compute]  # each class's cards, fewer and fewer
            for memory in CLASS_MEMORY:
                k = partly = 0
                for _, card_memory, key, used in free:
                    if card_memory >= memory:
                        k, partly = k + 1, partly + used
                        entries[(compute, memory, k)] = (max(0, k - partly), *key, node_id)
        return entries

    def could_offer(self, ask: Ask, best: tuple | None) -> bool:
        """A quick necessary condition for an offer better than ``best``: at most as many
        partly used cards fit as have enough free compute, and as have enough free memory;
        the rest of ``count`` would be empty cards, which binpack counts against it."""
        count = ask.count
        if ask.whole_card:
            return self.empty >= count
        fitting = min(
            bisect_right(self.compute, -ask.compute_pct), bisect_right(self.memory, -ask.memory_mib)
        )
        opened = count - fitting
        if opened > self.empty:
            return False
        return best is None or ask.policy == SPREAD or opened <= best[0][0]

    def offer(self, ask: Ask) -> tuple[tuple, tuple[int, ...]] | None:
        """Placement's ``_one_node`` for this node alone: its best ``count`` cards that
        match and fit, and the key the nodes are compared by."""
        cards = reversed(self.cards) if ask.policy == SPREAD else self.cards
        offered: list[tuple[tuple, Card]] = []
        for key, card in cards:
            if fits(card, ask) and matches(card, ask):
                offered.append((key, card))
                if len(offered) == ask.count:
                    break
        else:
            return None
        ids = tuple(card.id for _, card in offered)
        key, card = offered[-1]
        if ask.policy == SPREAD:
            return (0, *spread_key(card)), ids
        return (sum(k[0] for k, _ in offered), *key), ids


def _shape(card: Card) -> Shape:
    return (card.model, card.compute_capacity, card.memory_capacity_mib, card.memory_physical_mib)


class CardIndex:
    """Cards by id plus the placement index over those that can take a slice now."""

    def __init__(self, cards: Iterable[Card] = ()) -> None:
        self.cards: dict[int, Card] = {}
        self._by_node: dict[str, set[int]] = defaultdict(set)
        # shape -> free compute -> [(free memory, id)] sorted; shape -> [id] of empty cards
        self._buckets: dict[Shape, dict[int, list[tuple[int, int]]]] = defaultdict(dict)
        self._empty: dict[Shape, list[int]] = defaultdict(list)
        # node id -> its cards; (policy, k) -> [(bound, node id)] sorted; nodes to refresh
        self._nodes: dict[int, _Node] = {}
        self._node_ids: dict[int, set[int]] = defaultdict(set)
        self._ranks: dict[tuple[str, int], list[tuple[tuple, int]]] = defaultdict(list)
        self._stale: set[int] = set()
        for card in cards:
            self.update(card, rank=False)
        self._refresh_nodes()

    def __len__(self) -> int:
        return len(self.cards)

    def update(self, card: Card, rank: bool = True) -> None:
        """Add a card or replace it with its new state (after a placement or a release).
        ``rank=False`` leaves its node's ranks for the next placement (bulk loading)."""
        old = self.cards.get(card.id)
        if old is not None:
            self._unindex(old)
        self.cards[card.id] = card
        self._by_node[card.node_name].add(card.id)
        self._node_ids[card.node_id].add(card.id)
        self._stale.add(card.node_id)
        if card.schedulable and not card.held_whole:
            if card.slices == 0:
                insort(self._empty[_shape(card)], card.id)
            else:
                bucket = self._buckets[_shape(card)].setdefault(card.compute_free, [])
                insort(bucket, (card.memory_free_mib, card.id))
        if rank:
            self._refresh_nodes()

    def remove(self, card_id: int) -> None:
        card = self.cards.pop(card_id, None)
        if card is not None:
            self._unindex(card)
            self._refresh_nodes()

    def _unindex(self, card: Card) -> None:
        self._by_node[card.node_name].discard(card.id)
        self._node_ids[card.node_id].discard(card.id)
        self._stale.add(card.node_id)
        if not card.schedulable or card.held_whole:
            return
        shape = _shape(card)
        if card.slices == 0:
            self._empty[shape].remove(card.id)
            return
        bucket = self._buckets[shape][card.compute_free]
        del bucket[bisect_left(bucket, (card.memory_free_mib, card.id))]
        if not bucket:
            del self._buckets[shape][card.compute_free]

    # --- placement -------------------------------------------------------------------

    def place(self, ask: Ask) -> tuple[int, ...] | None:
        """What ``placement.place(self.cards.values(), ask)`` answers."""
        if not ask.valid:
            return None
        if ask.node:  # one node's cards: read them, then choose
            ids = self._by_node.get(ask.node, ())
            found = [c for i in ids if matches(c := self.cards[i], ask) and fits(c, ask)]
            return choose(found, ask)
        if ask.same_node:
            return self._one_node(ask)
        ordered = self._ordered(ask)
        if ask.policy == SPREAD:
            return round_robin(ordered, ask.count)
        chosen = tuple(card.id for _, card in zip(range(ask.count), ordered, strict=False))
        return chosen if len(chosen) == ask.count else None

    def _one_node(self, ask: Ask) -> tuple[int, ...] | None:
        """``placement``'s choice of one node: nodes in the order of their bound for
        ``count`` cards, until the bound of the next is no better than the best offer."""
        self._refresh_nodes()
        nodes = self._nodes
        best: tuple[tuple, tuple[int, ...]] | None = None
        rank = (SPREAD,) if ask.policy == SPREAD else _size_class(ask)
        for bound in self._ranks.get((*rank, ask.count), ()):
            if best is not None and bound >= best[0]:
                break
            node_id = bound[-1]
            node = nodes[node_id]
            if not node.could_offer(ask, best):
                continue
            found = node.offer(ask)
            if found is not None and (best is None or (*found[0], node_id) < best[0]):
                best = (*found[0], node_id), found[1]
        return best[1] if best else None

    def _refresh_nodes(self) -> None:
        """Bring the changed nodes' entries in the ranks up to date (only those that moved)."""
        stale, self._stale = self._stale, set()
        rebuild = len(stale) > len(self._nodes) // 4
        ranks = self._ranks
        for node_id in stale:
            node = self._nodes.get(node_id)
            if node is None:
                node = self._nodes[node_id] = _Node()
            node.refresh(
                c for i in self._node_ids[node_id]
                if (c := self.cards[i]).schedulable and not c.held_whole
            )  # fmt: skip
            old, node.entries = node.entries, node.ranked(node_id)
            if rebuild:
                continue
            for rank, entry in old.items():
                if node.entries.get(rank) != entry:
                    ranked = ranks[rank]
                    del ranked[bisect_left(ranked, entry)]
            for rank, entry in node.entries.items():
                if old.get(rank) != entry:
                    insort(ranks[rank], entry)
        if rebuild:
            self._ranks = ranks = defaultdict(list)
            for node in self._nodes.values():
                for rank, entry in node.entries.items():
                    ranks[rank].append(entry)
            for ranked in ranks.values():
                ranked.sort()

    def _shapes(self, ask: Ask) -> Iterator[Shape]:
        for shape in set(self._buckets) | set(self._empty):
            model, compute, memory, physical = shape
            if ask.model and model != ask.model:
                continue
            if ask.whole_card or (
                ask.compute_pct <= min(MAX_COMPUTE_PCT, compute)
                and ask.memory_mib <= min(physical, memory)
            ):
                yield shape

    def _ordered(self, ask: Ask) -> Iterator[Card]:
        """The cards that match and fit the ask, best first in its policy's order."""
        backwards = ask.policy == SPREAD
        runs: list[tuple[list, range]] = []  # a sorted list and the part of it that fits
        for shape in self._shapes(ask):
            if empty := self._empty.get(shape):
                runs.append(
                    (empty, range(len(empty) - 1, -1, -1) if backwards else range(len(empty)))
                )
            if ask.whole_card:
                continue
            for free, bucket in self._buckets[shape].items():
                if free < ask.compute_pct:
                    continue
                start = bisect_left(bucket, (ask.memory_mib,))
                if start < len(bucket):
                    runs.append((bucket, range(len(bucket) - 1, start - 1, -1) if backwards
                                 else range(start, len(bucket))))  # fmt: skip
        return self._merge(runs, key_of(ask.policy), ask)

    def _merge(self, runs: list[tuple[list, range]], key, ask: Ask) -> Iterator[Card]:
        """Merge runs each already in ``key`` order, lazily; only cards that match."""
        cards = self.cards
        heap = []
        for n, (items, positions) in enumerate(runs):
            it = iter(positions)
            item = items[next(it)]
            card = cards[item[1] if isinstance(item, tuple) else item]
            heap.append((key(card), n, card, items, it))
        heapq.heapify(heap)
        labels = bool(ask.node_labels)
        while heap:
            _, n, card, items, it = heap[0]
            position = next(it, None)
            if position is None:
                heapq.heappop(heap)
            else:
                item = items[position]
                following = cards[item[1] if isinstance(item, tuple) else item]
                heapq.heapreplace(heap, (key(following), n, following, items, it))
            if not labels or matches(card, ask):
                yield card
