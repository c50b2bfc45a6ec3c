"""The cards of a pool kept in placement's order, so that a placement reads a few cards,
not all of them: ``CardIndex.place(ask)`` answers exactly what ``placement.place(cards,
ask)`` answers (tests/test_placement.py proves it), at 10,000 cards in well under 1 ms.

Cards are grouped by *shape* (model and capacities) and, inside a shape, by free compute:
one bucket per free compute value, sorted by free memory. Inside a bucket both placement
orders follow free memory, so the cards of a bucket that fit an ask are one run found by
bisection, already in order; the buckets' runs are merged lazily and only as many cards
are read as the ask needs. Empty cards are kept apart (they come last in binpack, first in
spread). Cards that cannot take anything now (held whole, cordoned, down) are not indexed.
Pure, like placement: no Django.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Iterable, Iterator

from pools.placement import (
    MAX_COMPUTE_PCT,
    SPREAD,
    Ask,
    Card,
    choose,
    fits,
    key_of,
    matches,
    round_robin,
)

Shape = tuple[str, int, int, int]  # model, compute capacity, memory capacity, physical memory


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
        for card in cards:
            self.update(card)

    def __len__(self) -> int:
        return len(self.cards)

    def update(self, card: Card) -> None:
        """Add a card or replace it with its new state (after a placement or a release)."""
        old = self.cards.get(card.id)
        if old is not None:
            self._unindex(old)
        self.cards[card.id] = card
        self._by_node[card.node_name].add(card.id)
        if card.schedulable and not card.held_whole:
            if card.slices == 0:
                insort(self._empty[_shape(card)], card.id)
            else:
                bucket = self._buckets[_shape(card)].setdefault(card.compute_free, [])
                insort(bucket, (card.memory_free_mib, card.id))

    def remove(self, card_id: int) -> None:
        card = self.cards.pop(card_id, None)
        if card is not None:
            self._unindex(card)

    def _unindex(self, card: Card) -> None:
        self._by_node[card.node_name].discard(card.id)
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
        ordered = self._ordered(ask)
        if ask.same_node:
            return self._one_node(ordered, ask)
        if ask.policy == SPREAD:
            return round_robin(ordered, ask.count)
        chosen = tuple(card.id for _, card in zip(range(ask.count), ordered, strict=False))
        return chosen if len(chosen) == ask.count else None

    def _one_node(self, ordered: Iterator[Card], ask: Ask) -> tuple[int, ...] | None:
        """``placement``'s choice of one node, read lazily. In the policy's order the cards
        of the preferred kind come first (partly used for binpack, empty for spread): the
        first node to gather ``count`` of them wins. When none does, and no card of that
        kind was seen, every node needs the other kind alike: again the first node to
        gather ``count`` wins. Otherwise nodes must be compared whole: read them all.
        Spread compares nodes by their worst card alone: the first to gather wins."""
        per_node: dict[int, list[Card]] = defaultdict(list)
        seen: list[Card] = []
        first_kind = None  # the kind (empty or not) of the first card in the order
        mixed = False
        for card in ordered:
            kind = card.slices == 0
            if first_kind is None or ask.policy == SPREAD:
                first_kind = kind
            elif kind != first_kind and not mixed:
                mixed = True
            seen.append(card)
            if mixed:
                continue
            cards = per_node[card.node_id]
            cards.append(card)
            if len(cards) == ask.count:
                return tuple(c.id for c in cards)
        return choose(seen, ask) if mixed else None

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
