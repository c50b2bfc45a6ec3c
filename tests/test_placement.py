"""Placement, the pure function: properties over random pools (hypothesis) and examples.

The properties are stated on ``placement.place``, which the allocation service runs on
the candidate cards it reads (``pools.services.picks``).
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from pools.placement import (
    BINPACK,
    SPREAD,
    Ask,
    Card,
    could_ever_fit,
    fits,
    free_share,
    matches,
    place,
    share_pct,
)

A100, T4 = "NVIDIA A100-SXM4-80GB", "Tesla T4"
PHYSICAL = {A100: 81920, T4: 15360}
GIB = 1024

# --- strategies ------------------------------------------------------------------------


@st.composite
def cards(draw, n: int | None = None, nodes: int = 4, most: int = 14) -> list[Card]:
    """A pool: a few nodes, two models, oversubscription or not, cards part used."""
    compute_ratio = draw(st.sampled_from([1, 1.5, 2]))
    memory_ratio = draw(st.sampled_from([1, 1.5]))
    count = n if n is not None else draw(st.integers(0, most))
    made = []
    for card_id in range(1, count + 1):
        node = draw(st.integers(1, nodes))
        model = draw(st.sampled_from([A100, T4]))
        physical = PHYSICAL[model]
        compute_cap, memory_cap = int(100 * compute_ratio), int(physical * memory_ratio)
        state = draw(st.sampled_from(["empty", "sliced", "sliced", "sliced", "whole", "down"]))
        slices = compute = memory = 0
        if state == "whole":
            slices, compute, memory = 1, compute_cap, memory_cap
        elif state in ("sliced", "down"):
            slices = draw(st.integers(1, 3))
            compute = draw(st.integers(slices, compute_cap))
            memory = draw(st.integers(0, memory_cap // GIB)) * GIB
        made.append(
            Card(
                id=card_id, node_id=node, node_name=f"node-{node}", model=model,
                compute_capacity=compute_cap, memory_capacity_mib=memory_cap,
                memory_physical_mib=physical, compute_used=compute, memory_used_mib=memory,
                slices=slices, held_whole=state == "whole", schedulable=state != "down",
                node_labels={"zone": "a" if node % 2 else "b"},
            )
        )  # fmt: skip
    return made


@st.composite
def asks(draw, policy: str | None = None) -> Ask:
    return Ask(
        count=draw(st.sampled_from([1, 1, 2, 3, 4])),
        compute_pct=draw(st.sampled_from([1, 10, 10, 25, 30, 50, 70, 100])),
        memory_mib=draw(
            st.sampled_from([0, 1, GIB, 8 * GIB, 8 * GIB, 15 * GIB, 40 * GIB, 80 * GIB])
        ),
        whole_card=draw(st.integers(0, 4)) == 0,
        model=draw(st.sampled_from(["", "", A100, T4])),
        node=draw(st.sampled_from(["", "", "", "", "", "node-1", "node-9"])),
        node_labels=draw(st.sampled_from([{}, {}, {}, {"zone": "a"}, {"zone": "c"}])),
        same_node=draw(st.booleans()),
        policy=policy or draw(st.sampled_from([BINPACK, SPREAD])),
    )


def after(card: Card, ask: Ask) -> Card:
    """The card once one vGPU of the ask is placed on it."""
    compute, memory = ask.take(card)
    return replace(
        card, compute_used=card.compute_used + compute, memory_used_mib=card.memory_used_mib
        + memory, slices=card.slices + 1, held_whole=ask.whole_card,
    )  # fmt: skip


def candidates(pool: list[Card], ask: Ask) -> list[Card]:
    return [c for c in pool if matches(c, ask) and fits(c, ask)]


def largest_share_after(pool: list[Card], ask: Ask, chosen: set[int]) -> float:
    return max(free_share(after(c, ask) if c.id in chosen else c) for c in pool)


# --- properties ------------------------------------------------------------------------


@given(cards(), asks())
def test_a_placement_never_takes_more_than_a_card_has(pool, ask):
    by_id = {c.id: c for c in pool}
    for card_id in place(pool, ask) or ():
        card, taken = by_id[card_id], after(by_id[card_id], ask)
        assert taken.compute_used <= card.compute_capacity
        assert taken.memory_used_mib <= card.memory_capacity_mib
        if not ask.whole_card:
            assert ask.compute_pct <= 100 and ask.memory_mib <= card.memory_physical_mib
        assert card.schedulable and not card.held_whole
        assert not ask.whole_card or card.slices == 0


@given(cards(), asks())
def test_a_placement_is_all_or_nothing_on_distinct_cards(pool, ask):
    chosen = place(pool, ask)
    if chosen is not None:
        assert len(chosen) == len(set(chosen)) == ask.count
        return
    # Nothing placed only when nothing could be: too few candidates, or no node with enough.
    found = candidates(pool, ask)
    per_node = [sum(c.node_id == n for c in found) for n in {c.node_id for c in found}]
    assert (max(per_node, default=0) if ask.same_node else len(found)) < ask.count


@given(cards(), asks())
def test_a_placement_keeps_the_asks_constraints(pool, ask):
    by_id = {c.id: c for c in pool}
    chosen = [by_id[i] for i in place(pool, ask) or ()]
    for card in chosen:
        assert not ask.model or card.model == ask.model
        assert not ask.node or card.node_name == ask.node
        assert all(card.node_labels.get(k) == v for k, v in ask.node_labels.items())
    if ask.same_node:
        assert len({c.node_id for c in chosen}) <= 1


@given(cards(), asks(policy=BINPACK))
def test_binpack_never_opens_an_empty_card_while_a_partly_used_one_fits(pool, ask):
    chosen = set(place(pool, ask) or ())
    if not chosen or ask.same_node:
        return
    by_id = {c.id: c for c in pool}
    left_partly_used = [c for c in candidates(pool, ask) if c.slices and c.id not in chosen]
    assert not (left_partly_used and any(by_id[i].slices == 0 for i in chosen))


@given(cards(), asks(policy=BINPACK))
def test_binpack_on_one_node_prefers_the_node_that_opens_fewer_empty_cards(pool, ask):
    ask = replace(ask, same_node=True)
    chosen = place(pool, ask)
    if chosen is None:
        return
    opened = sum(c.slices == 0 for c in pool if c.id in chosen)
    found = candidates(pool, ask)
    for node in {c.node_id for c in found}:
        on_node = sorted(c.slices == 0 for c in found if c.node_id == node)
        if len(on_node) >= ask.count:
            assert opened <= sum(on_node[: ask.count])


@given(cards(), asks(policy=BINPACK))
def test_binpack_leaves_the_largest_free_slice_as_large_as_any_other_choice(pool, ask):
    ask = replace(ask, count=1, same_node=False)
    chosen = place(pool, ask)
    if chosen is None:
        return
    ours = largest_share_after(pool, ask, set(chosen))
    for other in candidates(pool, ask):
        assert ours >= largest_share_after(pool, ask, {other.id})


@given(cards(), asks(policy=SPREAD))
def test_spread_never_picks_a_fuller_card_while_an_emptier_one_fits(pool, ask):
    ask = replace(ask, count=1, same_node=False)
    chosen = place(pool, ask)
    if chosen is None:
        return
    [card] = [c for c in pool if c.id == chosen[0]]
    assert all(free_share(card) >= free_share(c) for c in candidates(pool, ask))


@given(cards(), asks(policy=SPREAD))
def test_spread_uses_distinct_nodes_before_a_second_card_on_any_node(pool, ask):
    ask = replace(ask, same_node=False)
    chosen = place(pool, ask)
    if chosen is None:
        return
    nodes_free = len({c.node_id for c in candidates(pool, ask)})
    nodes_used = len({c.node_id for c in pool if c.id in chosen})
    assert nodes_used == min(ask.count, nodes_free)


@given(cards(), asks(), st.randoms(use_true_random=False))
def test_a_placement_does_not_depend_on_the_order_of_the_cards(pool, ask, rnd):
    shuffled = list(pool)
    rnd.shuffle(shuffled)
    assert place(pool, ask) == place(shuffled, ask) == place(pool, ask)


@given(cards(), asks())
def test_an_ask_that_fits_now_could_ever_fit(pool, ask):
    if place(pool, ask) is not None:
        assert could_ever_fit(pool, ask)


# --- examples --------------------------------------------------------------------------


def card(card_id: int, node: int = 1, **kw) -> Card:
    model = kw.pop("model", A100)
    physical = PHYSICAL[model]
    return Card(
        id=card_id, node_id=node, node_name=f"node-{node}", model=model,
        compute_capacity=kw.pop("compute_capacity", 100),
        memory_capacity_mib=kw.pop("memory_capacity_mib", physical),
        memory_physical_mib=physical, **kw,
    )  # fmt: skip


def test_binpack_fills_the_partly_used_card_before_opening_an_empty_one():
    pool = [card(1), card(2, compute_used=40, memory_used_mib=10 * GIB, slices=1), card(3)]
    assert place(pool, Ask(compute_pct=30, memory_mib=8 * GIB)) == (2,)


def test_binpack_takes_the_tightest_fit_so_the_roomiest_card_stays_roomy():
    pool = [
        card(1, compute_used=20, memory_used_mib=16 * GIB, slices=1),
        card(2, compute_used=60, memory_used_mib=40 * GIB, slices=2),
    ]
    assert place(pool, Ask(compute_pct=30, memory_mib=8 * GIB)) == (2,)
    # The tightest card cannot take this one: it goes to the roomier card.
    assert place(pool, Ask(compute_pct=50, memory_mib=8 * GIB)) == (1,)


def test_spread_takes_the_emptiest_cards_one_node_after_another():
    pool = [card(1, 1), card(2, 1), card(3, 2, compute_used=50, memory_used_mib=GIB, slices=1)]
    ask = Ask(count=2, compute_pct=10, memory_mib=GIB, policy=SPREAD)
    assert set(place(pool, ask)) == {1, 3} or set(place(pool, ask)) == {2, 3}
    assert place(pool, replace(ask, count=1)) in ((1,), (2,))


def test_compute_counts_in_one_percent_steps_and_memory_in_one_mebibyte_steps():
    pool = [card(1, compute_used=99, memory_used_mib=81919, slices=3)]
    assert place(pool, Ask(compute_pct=1, memory_mib=1)) == (1,)
    assert place(pool, Ask(compute_pct=2, memory_mib=1)) is None
    assert place(pool, Ask(compute_pct=1, memory_mib=2)) is None


def test_a_slice_is_never_larger_than_one_physical_card_even_with_oversubscription():
    roomy = card(1, compute_capacity=200, memory_capacity_mib=2 * 81920)
    assert place([roomy], Ask(compute_pct=100, memory_mib=81920)) == (1,)
    assert place([roomy], Ask(compute_pct=100, memory_mib=81921)) is None
    assert place([roomy], Ask(compute_pct=101, memory_mib=1)) is None
    assert not could_ever_fit([roomy], Ask(compute_pct=100, memory_mib=81921))


def test_oversubscription_lets_two_full_slices_share_a_card():
    half_taken = card(1, compute_capacity=200, memory_capacity_mib=2 * 81920, compute_used=100,
                      memory_used_mib=81920, slices=1)  # fmt: skip
    assert place([half_taken], Ask(compute_pct=100, memory_mib=81920)) == (1,)


def test_a_whole_card_takes_only_an_empty_card_and_never_a_sliced_one():
    pool = [card(1, compute_used=1, memory_used_mib=1, slices=1), card(2)]
    assert place(pool, Ask(whole_card=True)) == (2,)
    assert place(pool, Ask(count=2, whole_card=True)) is None


def test_cards_held_whole_or_not_schedulable_take_nothing():
    pool = [card(1, held_whole=True, slices=1, compute_used=100, memory_used_mib=81920),
            card(2, schedulable=False)]  # fmt: skip
    assert place(pool, Ask(compute_pct=1)) is None
    assert could_ever_fit(pool, Ask(count=2, compute_pct=1))


def test_several_vgpus_on_one_node_go_to_one_node_or_nowhere():
    pool = [card(1, 1), card(2, 2), card(3, 2)]
    assert set(place(pool, Ask(count=2, compute_pct=50, same_node=True))) == {2, 3}
    assert place(pool, Ask(count=3, compute_pct=50, same_node=True)) is None
    assert set(place(pool, Ask(count=3, compute_pct=50))) == {1, 2, 3}
    assert not could_ever_fit(pool, Ask(count=3, same_node=True))


def test_constraints_on_model_node_and_labels_are_kept():
    pool = [card(1, 1, model=T4), card(2, 2, node_labels={"rack": "r1"}), card(3, 3)]
    assert place(pool, Ask(compute_pct=10, model=T4)) == (1,)
    assert place(pool, Ask(compute_pct=10, node_labels={"rack": "r1"})) == (2,)
    assert place(pool, Ask(compute_pct=10, node="node-3")) == (3,)
    assert place(pool, Ask(compute_pct=10, node="node-3", model=T4)) is None


def test_an_invalid_ask_places_nothing():
    pool = [card(1)]
    for ask in (Ask(count=0), Ask(compute_pct=0), Ask(compute_pct=101), Ask(memory_mib=-1)):
        assert place(pool, ask) is None


def test_the_ask_of_a_request_or_lease_takes_a_whole_card_as_all_of_it():
    spec = SimpleNamespace(
        count=2, compute_pct=30, memory_mib=4096, whole_card=True, gpu_model=T4, node_name="",
        node_labels=None, same_node=True,
    )  # fmt: skip
    ask = Ask.of(spec, SPREAD)
    assert (ask.compute_pct, ask.memory_mib, ask.whole_card) == (100, 0, True)
    assert (ask.count, ask.model, ask.node_labels, ask.same_node, ask.policy) == (
        2, T4, {}, True, SPREAD)  # fmt: skip
    sliced = Ask.of(SimpleNamespace(**{**vars(spec), "whole_card": False}))
    assert (sliced.compute_pct, sliced.memory_mib, sliced.policy) == (30, 4096, BINPACK)
    assert share_pct(True, 30) == 100 and share_pct(False, 30) == 30
