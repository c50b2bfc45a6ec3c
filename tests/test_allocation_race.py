"""The allocation service under race and its direct uses: cards and quotas are never
overcommitted whatever processes race for them; release, resize, whole cards and
stranded slices keep the cards' counters true."""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time

import psycopg
import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Count, Sum

from agents.choices import NodeState
from pools import placement, services
from pools.choices import AllocationState, LeaseState, PlacementPolicy
from pools.models import Allocation, Lease, PoolCard
from quotas.choices import RequestState, Role
from quotas.models import GpuRequest
from tests import procs
from tests.factories import (
    MembershipFactory,
    NodeFactory,
    PoolFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
    online_cards,
)

GIB = 1024


def counters() -> dict[int, tuple[int, int, int]]:
    return {
        c.gpu_id: (c.compute_allocated, c.memory_allocated_mib, c.slices)
        for c in PoolCard.objects.all()
    }


def held_by_allocations() -> dict[int, tuple[int, int, int]]:
    rows = (
        Allocation.objects.filter(state=AllocationState.ACTIVE)
        .values("gpu_id")
        .annotate(c=Sum("compute_pct"), m=Sum("memory_mib"), n=Count("id"))
    )
    return {r["gpu_id"]: (r["c"], r["m"], r["n"]) for r in rows}


def assert_counters_are_the_allocations() -> None:
    held = held_by_allocations()
    for card in PoolCard.objects.all():
        if card.held_whole:
            assert held[card.gpu_id][2] == card.slices == 1
            continue
        assert counters()[card.gpu_id] == held.get(card.gpu_id, (0, 0, 0))
        assert card.compute_allocated <= card.compute_capacity
        assert card.memory_allocated_mib <= card.memory_capacity_mib


# --- the service, directly --------------------------------------------------------------


@pytest.fixture
def pool(db):
    return PoolFactory(cards=online_cards(2))


def place(pool, holder, **ask):
    return services.place_lease(pool, placement.Ask(**ask), holder=holder, unix_user="bob")


@pytest.mark.django_db
def test_releasing_a_lease_returns_its_capacity_at_once(pool, bob):
    lease = place(pool, bob, count=2, compute_pct=60, memory_mib=40 * GIB)
    assert all(c[:2] == (60, 40 * GIB) for c in counters().values())
    with pytest.raises(services.PlacementError):
        place(pool, bob, compute_pct=50)
    assert services.release_lease(lease.pk)
    assert all(c == (0, 0, 0) for c in counters().values())
    assert place(pool, bob, count=2, compute_pct=100).state == LeaseState.ACTIVE
    assert not services.release_lease(lease.pk)  # twice: nothing more comes back
    assert_counters_are_the_allocations()


@pytest.mark.django_db
def test_a_resize_within_the_cards_room_changes_every_slice(pool, bob):
    lease = place(pool, bob, count=2, compute_pct=30, memory_mib=8 * GIB)
    services.resize_lease(lease.pk, compute_pct=70, memory_mib=70 * GIB)
    assert set(counters().values()) == {(70, 70 * GIB, 1)}
    assert set(lease.allocations.values_list("compute_pct", "memory_mib")) == {(70, 70 * GIB)}
    assert_counters_are_the_allocations()


@pytest.mark.django_db
def test_a_resize_beyond_the_cards_room_is_refused_and_changes_nothing(pool, bob, alice):
    lease = place(pool, bob, count=2, compute_pct=30, memory_mib=8 * GIB)
    place(pool, alice, compute_pct=50, memory_mib=GIB)  # one of the cards fills up
    before = (counters(), list(lease.allocations.values_list("compute_pct", "memory_mib")))
    with pytest.raises(services.PlacementError):
        services.resize_lease(lease.pk, compute_pct=60, memory_mib=8 * GIB)
    with pytest.raises(services.PlacementError):  # larger than a physical card
        services.resize_lease(lease.pk, compute_pct=10, memory_mib=81921)
    after = (counters(), list(lease.allocations.values_list("compute_pct", "memory_mib")))
    assert after == before
    assert Lease.objects.get(pk=lease.pk).compute_pct == 30
    assert_counters_are_the_allocations()


@pytest.mark.django_db
def test_a_whole_card_keeps_every_slice_off_it_and_a_sliced_card_cannot_be_taken_whole(
    pool, bob, alice
):
    whole = place(pool, bob, whole_card=True)
    [held] = [gpu for gpu, c in counters().items() if c[2]]
    assert PoolCard.objects.get(gpu_id=held).held_whole
    sliced = place(pool, alice, compute_pct=1, memory_mib=1)
    assert sliced.allocations.get().gpu_id != held
    with pytest.raises(services.PlacementError):
        place(pool, alice, whole_card=True)  # the other card holds a slice now
    with pytest.raises(services.PlacementError):
        place(pool, alice, count=2, compute_pct=1)  # only one card takes slices
    services.release_lease(whole.pk)
    assert counters()[held] == (0, 0, 0)
    assert not PoolCard.objects.get(gpu_id=held).held_whole
    assert_counters_are_the_allocations()


@pytest.mark.django_db
def test_a_stranded_allocation_holds_nothing_and_its_release_gives_nothing_back(pool, bob):
    lease = place(pool, bob, count=2, compute_pct=40, memory_mib=4 * GIB)
    stranded = lease.allocations.first()
    # Stranding gives its card's capacity back (the card failed or left the pool).
    PoolCard.objects.filter(gpu_id=stranded.gpu_id).update(
        compute_allocated=0, memory_allocated_mib=0, slices=0
    )
    Allocation.objects.filter(pk=stranded.pk).update(state=AllocationState.STRANDED)
    assert services.release_lease(lease.pk)
    assert set(counters().values()) == {(0, 0, 0)}
    assert not lease.allocations.exclude(state=AllocationState.RELEASED).exists()


@pytest.mark.django_db
def test_a_request_that_does_not_fit_changes_nothing(pool, bob):
    before = (counters(), Lease.objects.count(), Allocation.objects.count())
    with pytest.raises(services.PlacementError) as refused:
        place(pool, bob, count=3, compute_pct=10)
    assert refused.value.never
    with pytest.raises(services.PlacementError) as later:
        place(pool, bob, count=2, compute_pct=10, model="no such model")
    assert later.value.never
    assert (counters(), Lease.objects.count(), Allocation.objects.count()) == before


@pytest.mark.django_db
def test_the_cards_read_in_sql_are_placements_best_in_its_own_order(bob):
    rnd = random.Random(3)
    pool = PoolFactory(cards=online_cards(6) + online_cards(6))
    for _ in range(20):
        with contextlib.suppress(services.PlacementError):
            place(
                pool, bob, compute_pct=rnd.choice([5, 20, 40]), memory_mib=rnd.randrange(1, 30000)
            )
    for compute in (1, 10, 30, 60, 100):
        ask = placement.Ask(compute_pct=compute, memory_mib=4 * GIB)
        assert placement.place(services.candidate_cards(pool, ask), ask) == placement.place(
            services.pool_cards(pool, schedulable_only=True), ask
        )


@pytest.mark.django_db
@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.SPREAD])
def test_an_ask_for_a_node_label_lands_on_that_node_on_every_path(bob, policy):
    # Binpack across cards picks in SQL; spread and one-node asks choose among the cards
    # read (placement.matches compares their nodes' labels in Python).
    rack = NodeFactory(state=NodeState.ONLINE, labels={"rack": "r1"})
    pool = PoolFactory(cards=online_cards(2) + online_cards(2, node=rack), policy=policy)
    ask = placement.Ask(compute_pct=10, memory_mib=GIB, node_labels={"rack": "r1"})
    assert {c.node_labels.get("rack") for c in services.candidate_cards(pool, ask)} == {"r1"}
    for count, same_node in ((1, False), (2, True), (2, False)):
        lease = place(pool, bob, count=count, compute_pct=10, memory_mib=GIB,
                      node_labels={"rack": "r1"}, same_node=same_node)  # fmt: skip
        assert set(lease.allocations.values_list("gpu__node_id", flat=True)) == {rack.pk}
    assert_counters_are_the_allocations()


# --- racing processes ----------------------------------------------------------------------

CHILD = """
import json, random, time
import django
django.setup()
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from pools.models import Pool
from quotas.requests import services
from quotas.choices import RequestState
from quotas.models import GpuRequest, Membership

pool = Pool.objects.get(slug=%(pool)r)
members = list(Membership.objects.filter(user__username__startswith="racer-")
               .select_related("user", "tenant").order_by("pk"))
rnd = random.Random(%(seed)d)
time.sleep(max(0.0, %(start)f - time.time()))
made = refused = ended = 0
for _ in range(%(requests)d):
    member = rnd.choice(members)
    try:
        services.create_request(
            member.user, tenant=member.tenant, pool=pool, count=rnd.choice([1, 1, 1, 2]),
            compute_pct=rnd.choice([10, 20, 30, 50]), memory_mib=rnd.choice([1024, 8192, 20480]),
            duration_hours=1, reason="race",
        )
        made += 1
    except ValidationError:
        refused += 1
    if rnd.random() < 0.15:  # now and then a placed request of this member ends
        mine = GpuRequest.objects.filter(requester=member.user, state=RequestState.ALLOCATED)
        if (first := mine.order_by("?").first()) is not None:
            try:
                services.end_request(first.pk, member.user)
                ended += 1
            except ValidationError:  # another process ended it first
                pass
print(json.dumps({"made": made, "refused": refused, "ended": ended}))
"""

LIMIT_VGPUS, LIMIT_COMPUTE, LIMIT_MEMORY = 6, 200, 60 * GIB

WATCH_SQL = """
SELECT 'card', pc.gpu_id FROM pools_poolcard pc
  LEFT JOIN (SELECT gpu_id, sum(compute_pct) c, sum(memory_mib) m, count(*) n
               FROM pools_allocation WHERE state = 'active' GROUP BY gpu_id) a
         ON a.gpu_id = pc.gpu_id
 WHERE pc.compute_allocated > pc.compute_capacity
    OR pc.memory_allocated_mib > pc.memory_capacity_mib
    OR (NOT pc.held_whole AND (pc.compute_allocated, pc.memory_allocated_mib, pc.slices)
        <> (coalesce(a.c, 0), coalesce(a.m, 0), coalesce(a.n, 0)))
UNION ALL
SELECT 'tenant', r.tenant_id FROM quotas_gpurequest r
  JOIN pools_allocation a ON a.lease_id = r.lease_id AND a.state IN ('active', 'stranded')
 GROUP BY r.tenant_id
HAVING count(*) > %s OR sum(a.compute_pct) > %s OR sum(a.memory_mib) > %s
"""


def watch(stop: threading.Event, seen: list, rounds: list) -> None:
    """Check the invariants again and again while the race runs, each time on one
    consistent snapshot (REPEATABLE READ): a violation at any moment is caught."""
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as db:
        while not stop.is_set():
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                found = db.execute(WATCH_SQL, [LIMIT_VGPUS, LIMIT_COMPUTE, LIMIT_MEMORY])
                seen.extend(found.fetchall())
            rounds.append(1)
            time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.SPREAD])
def test_racing_requests_never_overcommit_a_card_or_pass_a_tenants_quota(policy):
    # 4 cards (400 %, 320 GiB) for 3 tenants of up to 200 % each: 600 % may be asked.
    pool = PoolFactory(cards=online_cards(2) + online_cards(2), policy=policy)
    for t in range(3):
        tenant = TenantFactory()
        QuotaFactory(
            tenant=tenant, pool=pool, guaranteed_vgpus=2, limit_vgpus=LIMIT_VGPUS,
            guaranteed_compute_pct=100, limit_compute_pct=LIMIT_COMPUTE,
            guaranteed_memory_mib=GIB, limit_memory_mib=LIMIT_MEMORY,
            auto_approve_vgpus=2, auto_approve_compute_pct=100, auto_approve_hours=24,
        )  # fmt: skip
        for m in range(2):
            MembershipFactory(user=UserFactory(username=f"racer-{t}-{m}"), tenant=tenant,
                              role=Role.MEMBER)  # fmt: skip
    env = procs.child_env(
        DATABASE_URL=procs.database_url(settings.DATABASES["default"]),
        DJANGO_SETTINGS_MODULE="portal.settings",
    )
    start = time.time() + 3
    children, results = 4, []
    stop, seen, rounds = threading.Event(), [], []
    watcher = threading.Thread(target=watch, args=(stop, seen, rounds))
    watcher.start()

    def child(n: int) -> None:
        script = CHILD % {"pool": pool.slug, "seed": n, "start": start, "requests": 50}
        results.append(procs.run_python(script, env, timeout=300))

    threads = [threading.Thread(target=child, args=(n,)) for n in range(children)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop.set()
        watcher.join()
    assert len(results) == children, "a child failed: see its output above"
    assert sum(r["made"] + r["refused"] for r in results) == 200
    assert sum(r["refused"] for r in results) > 0  # the quotas did bite
    assert GpuRequest.objects.filter(state=RequestState.ALLOCATED).exists()
    assert len(rounds) > 3 and seen == []
    assert_counters_are_the_allocations()
    with connection.cursor() as cursor:
        cursor.execute(WATCH_SQL, [LIMIT_VGPUS, LIMIT_COMPUTE, LIMIT_MEMORY])
        assert cursor.fetchall() == []
    # Every placed request holds exactly its count of allocations, on distinct cards.
    for req in GpuRequest.objects.filter(state=RequestState.ALLOCATED):
        cards = list(req.lease.allocations.values_list("gpu_id", flat=True))
        assert len(cards) == len(set(cards)) == req.count
    print(json.dumps(results))
