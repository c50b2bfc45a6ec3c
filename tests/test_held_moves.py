"""A slice moved to another card (failover re-placement, a cluster's scheduler) or
stranded keeps counting what it held before: GPU-hours and memory-GiB-hours in the
accounting and the quotas are the true held seconds, a stranded stretch is not charged,
and the time on each card stays that card's (used and idle hours, owner rollups)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pools import failover
from pools.choices import AllocationState, LeaseState
from pools.interface import Ask, place_lease, release_lease
from pools.models import Allocation, AllocationSpan
from quotas.choices import RequestState
from quotas.interface import held_hours, quota_usage
from quotas.models import GpuRequest
from quotas.requests.permissions import owners_visible_to
from quotas.tenancy.usage import TENANT, gpu_hours_left
from reports import accounting
from reports.models import UsageDay
from telemetry.models import GpuHour, OwnerHour
from tests.factories import (
    PoolFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
    online_cards,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(db):
    """Tenant acme's quota in a pool of two cards on two nodes (the quota sets a GPU-hour
    budget, so ``gpu_hours_left`` counts too)."""
    (a,), (b,) = online_cards(1), online_cards(1)
    pool = PoolFactory(name="p", cards=[a, b])
    quota = QuotaFactory(tenant=TenantFactory(name="acme"), pool=pool, limit_gpu_hours=1000)
    return quota, a, b


def _placed(quota, user, *, compute_pct=40, memory_mib=8192, whole_card=False) -> Allocation:
    """One vGPU placed through the allocation service and held by a request of the
    quota's tenant."""
    ask = Ask(compute_pct=compute_pct, memory_mib=memory_mib, whole_card=whole_card, node="")
    lease = place_lease(quota.pool, ask, holder=user, unix_user=user.get_username())
    GpuRequest.objects.create(
        tenant=quota.tenant, pool=quota.pool, requester=user, reason="test", lease=lease,
        compute_pct=compute_pct, memory_mib=memory_mib, whole_card=whole_card,
        state=RequestState.ALLOCATED, placed_at=timezone.now(),
    )  # fmt: skip
    return lease.allocations.get()


def _pass(seconds: float) -> None:
    """Time passes: every held moment recorded so far moves ``seconds`` into the past."""
    back = timedelta(seconds=seconds)
    for model in (Allocation, AllocationSpan):
        model.objects.filter(placed_at__isnull=False).update(placed_at=F("placed_at") - back)
        model.objects.filter(released_at__isnull=False).update(released_at=F("released_at") - back)


def _measured(quota, alice) -> tuple[Decimal, Decimal, Decimal, Decimal, Decimal]:
    """(the quota's month, the accounting's month, its memory-GiB-hours, held_hours'
    GPU-hours over the month, the budget used per ``gpu_hours_left``)."""
    # Past days are summed once (they never change in production); ``_pass`` rewrites
    # the past, so the days written are forgotten and summed again.
    UsageDay.objects.all().delete()
    now = timezone.now()
    [usage] = quota_usage([quota.tenant_id], now=now)
    month = timezone.localdate().replace(day=1)
    report = accounting.monthly(month, alice)
    held = held_hours((TENANT,), accounting._bounds(month), now + timedelta(days=1))
    left = Decimal(quota.limit_gpu_hours) - gpu_hours_left(quota, now)
    total = report.total
    gpu = held[(quota.tenant_id,)].gpu_hours if held else Decimal(0)
    return usage.used.gpu_hours, total.gpu_hours, total.memory_gib_hours, gpu, left


def _assert_held(quota, alice, started, seconds: float, pct: int, mib: int) -> None:
    """What the quota, the accounting, ``held_hours`` and the budget count is ``seconds``
    of a ``pct`` % slice of ``mib`` MiB; an open slice also holds the real seconds the
    test has run since ``started`` (an upper bound), and each day is kept to 1/10000."""
    quota_month, billed, gib_hours, held, budget = _measured(quota, alice)
    ran = (timezone.now() - started).total_seconds() + 1
    rounding = Decimal("0.0001") * 40
    for value, per_second in ((quota_month, pct / 100), (billed, pct / 100),
                              (held, pct / 100), (budget, pct / 100),
                              (gib_hours, mib / 1024)):  # fmt: skip
        low = Decimal(seconds * per_second / 3600) - rounding
        high = Decimal((seconds + ran) * per_second / 3600) + rounding
        assert low <= value <= high, (value, low, high)


def test_hours_before_a_failover_move_a_strand_and_a_scheduler_move_all_count(world, alice):
    quota, a, b = world
    dev = UserFactory(username="dev", password=None)
    started = timezone.now()
    allocation = _placed(quota, dev)  # 40 % and 8 GiB
    first = allocation.gpu_id
    _pass(3600)  # an hour on the first card
    move = failover.replace_allocation(allocation.pk, "card lost")
    assert move.from_gpu_id == first and move.to_gpu_id != first
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.ACTIVE and allocation.released_at is None
    _assert_held(quota, alice, started, 3600, 40, 8192)
    _pass(1800)  # half an hour on the second
    # The first card is cordoned: a new failure finds no card and strands the slice.
    failover.cordon_card(quota.pool.cards.get(gpu_id=first).pk, "test")
    assert failover.replace_allocation(allocation.pk, "card lost").to_gpu_id is None
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.STRANDED and allocation.placed_at is None
    _pass(7200)  # two hours stranded: held nothing, charged nothing
    _assert_held(quota, alice, started, 5400, 40, 8192)
    failover.clear_cordon(quota.pool.cards.get(gpu_id=first), alice)
    assert failover.replace_allocation(allocation.pk, "re-placement").to_gpu_id == first
    _pass(600)  # ten minutes back on the first
    # The cluster's scheduler puts it on the other card.
    other = b.pk if first == a.pk else a.pk
    assert failover.move_allocation(allocation.pk, other, "scheduler").to_gpu_id == other
    _pass(900)  # a quarter hour there
    _assert_held(quota, alice, started, 6900, 40, 8192)
    spans = list(AllocationSpan.objects.filter(allocation=allocation).order_by("placed_at"))
    assert [(s.gpu_id, s.reason) for s in spans] == [
        (first, "moved"),
        (other, "stranded"),
        (first, "moved"),
    ]
    release_lease(allocation.lease_id)
    GpuRequest.objects.filter(lease_id=allocation.lease_id).update(state=RequestState.RELEASED)
    _pass(3600)  # released: nothing more
    _assert_held(quota, alice, started, 6900, 40, 8192)


def test_a_stranded_slice_released_is_charged_only_its_held_time(world, alice):
    quota, _a, _b = world
    dev = UserFactory(username="dev", password=None)
    started = timezone.now()
    allocation = _placed(quota, dev, compute_pct=50, memory_mib=1024)
    for card in quota.pool.cards.all():
        failover.cordon_card(card.pk, "test")
    _pass(1200)
    assert failover.replace_allocation(allocation.pk, "node drained").to_gpu_id is None
    _pass(5000)
    release_lease(allocation.lease_id)
    _pass(100)
    _assert_held(quota, alice, started, 1200, 50, 1024)


def _at(allocation: Allocation, t0: datetime, hours: list[tuple[int, int]]) -> None:
    """Put the allocation's stretches (oldest first, the open one last) at whole hours
    after ``t0``: [(start h, end h), ...]."""
    spans = list(AllocationSpan.objects.filter(allocation=allocation).order_by("placed_at"))
    *closed, (start, end) = hours
    for span, (s, e) in zip(spans, closed, strict=True):
        AllocationSpan.objects.filter(pk=span.pk).update(
            placed_at=t0 + timedelta(hours=s), released_at=t0 + timedelta(hours=e)
        )
    Allocation.objects.filter(pk=allocation.pk).update(
        placed_at=t0 + timedelta(hours=start), released_at=t0 + timedelta(hours=end)
    )


def test_used_and_idle_hours_stay_with_the_card_they_were_on(world, alice):
    quota, a, b = world
    dev = UserFactory(username="dev", password=None)
    allocation = _placed(quota, dev, compute_pct=100, whole_card=True)
    first, other = (a, b) if allocation.gpu_id == a.pk else (b, a)
    assert failover.replace_allocation(allocation.pk, "card lost").to_gpu_id == other.pk
    release_lease(allocation.lease_id)
    # Held on the first card 10:00-12:00, on the other 12:00-14:00, three days ago.
    t0 = (timezone.now() - timedelta(days=3)).replace(hour=10, minute=0, second=0,
                                                     microsecond=0)  # fmt: skip
    _at(allocation, t0, [(0, 2), (2, 4)])
    for h in range(4):
        # The first card is busy all along (someone else's after 12:00); the other is
        # busy before 12:00 (not ours) and idle once the slice is there.
        for gpu, util in ((first, 100.0), (other, 100.0 if h < 2 else 0.0)):
            GpuHour.objects.create(gpu=gpu, bucket=t0 + timedelta(hours=h), samples=720,
                                   util_avg=util, memory_used_avg_mib=0)  # fmt: skip
    report = accounting.monthly(t0.date().replace(day=1), alice)
    total = report.total
    assert total.gpu_hours == Decimal("4.0000")
    assert total.used_gpu_hours == pytest.approx(2.0)  # the first card's 2 busy hours
    assert total.idle_gpu_hours == pytest.approx(2.0)  # the other card's 2 idle hours


def test_the_old_cards_owner_rollups_stay_visible_to_the_tenant(world, alice):
    quota, a, b = world
    dev = UserFactory(username="dev", password=None)
    allocation = _placed(quota, dev)
    first, other = (a, b) if allocation.gpu_id == a.pk else (b, a)
    _pass(3 * 3600)
    failover.replace_allocation(allocation.pk, "card lost")
    span = AllocationSpan.objects.get(allocation=allocation)
    grant = owners_visible_to(alice, [first.pk, other.pk])
    assert grant is not None
    hour = span.placed_at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    OwnerHour.objects.create(gpu=first, owner="dev", samples=720, bucket=hour,
                             memory_used_avg_mib=1)  # fmt: skip
    OwnerHour.objects.create(gpu=other, owner="dev", samples=720, bucket=hour,
                             memory_used_avg_mib=1)  # fmt: skip
    seen = set(OwnerHour.objects.filter(grant).values_list("gpu_id", flat=True))
    # Before the move the slice was on the first card: that hour is the tenant's there,
    # not on the card it moved to.
    assert seen == {first.pk}


# One slice's life: steps of (what happens, minutes that pass after it).
steps = st.lists(
    st.tuples(st.sampled_from(["wait", "failover", "strand", "scheduler"]), st.integers(1, 600)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(steps=steps, pct=st.integers(1, 100), release=st.booleans())
def test_any_life_of_moves_and_strands_counts_the_held_seconds(world, alice, steps, pct,
                                                                release):  # fmt: skip
    quota, a, b = world
    with transaction.atomic():
        dev = UserFactory(password=None)
        started = timezone.now()
        allocation = _placed(quota, dev, compute_pct=pct, memory_mib=2048)
        held = 0.0
        for what, minutes in steps:
            state = Allocation.objects.get(pk=allocation.pk)
            if what == "strand" and state.state == AllocationState.ACTIVE:
                for card in quota.pool.cards.all():
                    failover.cordon_card(card.pk, "test")
                failover.replace_allocation(allocation.pk, "card lost")
                for card in quota.pool.cards.all():
                    failover.clear_cordon(card, alice)
            elif what == "failover":  # also re-places a stranded one
                failover.replace_allocation(allocation.pk, "node drained")
            elif what == "scheduler" and state.state == AllocationState.ACTIVE:
                other = b.pk if state.gpu_id == a.pk else a.pk
                assert failover.move_allocation(allocation.pk, other, "scheduler")
            live = Allocation.objects.get(pk=allocation.pk).state == AllocationState.ACTIVE
            held += minutes * 60 if live else 0
            _pass(minutes * 60)
        if release:
            release_lease(allocation.lease_id)
            _pass(60)
        assert Allocation.objects.get(pk=allocation.pk).lease.state == (
            LeaseState.RELEASED if release else LeaseState.ACTIVE
        )
        _assert_held(quota, alice, started, held, pct, 2048)
        transaction.set_rollback(True)
