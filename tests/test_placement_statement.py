"""A binpack placement in one prepared statement (issue #23): the slicing check folded into
its pick places exactly as the rules did before it (slice_refusal, then placement.place
over every card), its statements are prepared once per connection, and a placement's
commit reads Redis once for the agent sync and the pool pages."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agents.choices import GpuVendor, NodeState
from pools import lease_sql, live, placement, services, slicing, tasks
from pools.models import Allocation, PoolCard
from portal import redis_client
from tests.factories import GPUFactory, NodeFactory, PoolFactory, UserFactory

GIB = 1024
KINDS = {  # (vendor, model, physical MiB): NVIDIA slices, Hygon slices, AMD whole only
    "nvidia": (GpuVendor.NVIDIA, "NVIDIA A100-SXM4-80GB", 81920),
    "hygon": (GpuVendor.HYGON, "DCU K100_AI", 65520),
    "amd": (GpuVendor.AMD, "Arcturus GL-XL [Instinct MI100]", 32768),
}

card_states = st.lists(
    st.tuples(
        st.sampled_from(["nvidia", "nvidia", "nvidia", "hygon", "amd"]),
        st.integers(0, 2),  # node
        st.sampled_from([0, 0, 1, 2, 3]),  # slices already on it
        st.integers(0, 80),  # compute allocated, when sliced
        st.integers(0, 80),  # memory allocated in % of the card, when sliced
        st.sampled_from([False, False, False, True]),  # held whole (when it holds one slice)
    ),
    min_size=1,
    max_size=8,
)
ask_of = st.builds(
    placement.Ask,
    count=st.sampled_from([1, 1, 2, 3]),
    compute_pct=st.sampled_from([5, 20, 50, 100]),
    memory_mib=st.sampled_from([GIB, 8 * GIB, 24 * GIB, 70 * GIB]),
    whole_card=st.sampled_from([False, False, True]),
    model=st.sampled_from(["", "", "", "", KINDS["hygon"][1], KINDS["amd"][1]]),
    vendor=st.sampled_from(["", "", GpuVendor.NVIDIA, GpuVendor.HYGON]),
)


def make_pool(states):
    nodes = [NodeFactory(state=NodeState.ONLINE) for _ in range(3)]
    gpus = [
        GPUFactory(node=nodes[node], vendor=KINDS[kind][0], model=KINDS[kind][1],
                   memory_total_mib=KINDS[kind][2])
        for kind, node, *_ in states
    ]  # fmt: skip
    pool = PoolFactory(cards=gpus)
    for gpu, (_kind, _node, slices, compute, memory, whole) in zip(gpus, states, strict=True):
        card = PoolCard.objects.get(gpu=gpu)
        if whole and slices == 1:
            card.held_whole, card.compute_allocated = True, card.compute_capacity
            card.memory_allocated_mib = card.memory_capacity_mib
        elif slices:
            card.compute_allocated = compute
            card.memory_allocated_mib = card.memory_capacity_mib * memory // 100
        card.slices = slices
        card.save()
    return pool


def old_rules(pool, ask: placement.Ask) -> str | frozenset[int] | None:
    """What place_lease answered before the check joined the statement: the refusal of
    ``slicing`` over the (vendor, model) of the pool's other vendors' cards the ask could
    land on, else ``placement.place`` over every card of the pool (None: no room)."""
    cards = services.pool_cards(pool)
    if not ask.whole_card and not (ask.vendor and ask.vendor not in slicing.OTHER_VENDORS):
        kinds = {
            (c.vendor, c.model) for c in cards
            if c.vendor in slicing.OTHER_VENDORS and (not ask.model or c.model == ask.model)
            and (not ask.vendor or c.vendor == ask.vendor)
        }  # fmt: skip
        if refusal := slicing.slice_refusal(kinds):
            return refusal
    chosen = placement.place(cards, ask)
    return None if chosen is None else frozenset(chosen)


# Each example rolls its rows back, so the function-scoped fixtures are the same for all.
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(states=card_states, ask=ask_of)
def test_the_one_statement_places_as_the_rules_did(db, states, ask):
    with transaction.atomic():
        pool, holder = make_pool(states), UserFactory()
        expected = old_rules(pool, ask)
        before = {c.gpu_id: c for c in PoolCard.objects.filter(pool=pool)}
        try:
            lease = services.place_lease(pool, ask, holder=holder, unix_user="dev")
        except services.PlacementError as error:
            event("refused: whole cards only" if isinstance(expected, str) else "no room")
            if isinstance(expected, str):
                assert error.never and str(error) == expected
            else:
                assert expected is None
        else:
            assert isinstance(expected, frozenset), expected
            taken = set(Allocation.objects.filter(lease=lease).values_list("gpu_id", flat=True))
            assert taken == expected
            vendors = set(PoolCard.objects.filter(pool=pool).values_list("gpu__vendor", flat=True))
            event(f"placed, whole={ask.whole_card}, pool of {'/'.join(sorted(vendors))}")
            for card in PoolCard.objects.filter(pool=pool):
                old = before[card.gpu_id]
                if card.gpu_id not in taken:
                    assert card.compute_allocated == old.compute_allocated
                elif ask.whole_card:
                    assert card.held_whole and card.slices == 1
                else:
                    assert card.slices == old.slices + 1
                    assert card.compute_allocated == old.compute_allocated + ask.compute_pct
                    assert card.memory_allocated_mib == old.memory_allocated_mib + ask.memory_mib
                assert card.compute_allocated <= card.compute_capacity
                assert card.memory_allocated_mib <= card.memory_capacity_mib
        transaction.set_rollback(True)


@pytest.fixture
def nvidia_pool(db):
    node = NodeFactory(state=NodeState.ONLINE)
    return PoolFactory(cards=[GPUFactory(node=node) for _ in range(4)])


def test_a_binpack_placement_and_its_release_are_one_statement_each(nvidia_pool, bob):
    ask = placement.Ask(compute_pct=20, memory_mib=8 * GIB)
    with CaptureQueriesContext(connection) as placed:
        lease = services.place_lease(nvidia_pool, ask, holder=bob, unix_user="bob")
    with CaptureQueriesContext(connection) as released:
        assert services.release_lease(lease.pk)
    assert len(placed) == 1 and "FOR UPDATE OF pc SKIP LOCKED" in placed[0]["sql"]
    assert len(released) == 1


def test_the_statements_are_prepared_once_on_their_connection(nvidia_pool, bob):
    ask = placement.Ask(compute_pct=20, memory_mib=8 * GIB)
    for _ in range(3):
        lease = services.place_lease(nvidia_pool, ask, holder=bob, unix_user="bob")
        services.release_lease(lease.pk)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%WITH pick AS%"],
        )
        assert cursor.fetchall(), "the placement statement is prepared"
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%WITH claimed AS%"],
        )
        assert cursor.fetchall(), "the release statement is prepared"


def test_without_prepared_statements_the_hot_path_keeps_to_djangos_cursor(
    nvidia_pool, bob, settings
):
    settings.DATABASE_PREPARED_STATEMENTS = False
    with lease_sql.cursor() as cursor:
        assert not isinstance(cursor.cursor, lease_sql._PreparedCursor)
    lease = services.place_lease(
        nvidia_pool, placement.Ask(compute_pct=20, memory_mib=8 * GIB), holder=bob,
        unix_user="bob",
    )  # fmt: skip
    assert services.release_lease(lease.pk)
    assert PoolCard.objects.filter(pool=nvidia_pool, slices__gt=0).count() == 0


def test_a_commit_queues_the_agent_sync_once_and_tells_the_watched_page(
    nvidia_pool, bob, monkeypatch, django_capture_on_commit_callbacks
):
    queued, told = [], []
    monkeypatch.setattr(tasks.sync_desired_state, "apply_async",
                        lambda args, **kw: queued.append(args))  # fmt: skip
    monkeypatch.setattr(live, "pools_changed", lambda pools, watching: told.append(set(pools)))
    node_id = nvidia_pool.cards.first().gpu.node_id
    redis_client.client().delete(tasks._queued_key(node_id))
    live.watch(nvidia_pool.pk)
    ask = placement.Ask(compute_pct=20, memory_mib=8 * GIB)
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            services.place_lease(nvidia_pool, ask, holder=bob, unix_user="bob")
    assert queued == [(node_id,)]  # the second found it queued
    assert told == [{nvidia_pool.pk}, {nvidia_pool.pk}]
    redis_client.client().delete(tasks._queued_key(node_id))
    redis_client.client().zrem(live._watched_key(), nvidia_pool.pk)
