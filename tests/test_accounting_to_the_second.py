"""The accounting bills what quotas count, to the second (issue #27): an open slice is
held until now, not until midnight, and any set of slices placed, resized (a new
allocation) and released across day boundaries sums to the quota's month."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pools.models import Allocation
from quotas.interface import quota_usage
from reports import accounting
from tests.factories import PoolFactory, QuotaFactory, TenantFactory, UserFactory, held_allocation

pytestmark = pytest.mark.django_db


@pytest.fixture
def quota():
    return QuotaFactory(tenant=TenantFactory(name="acme"), pool=PoolFactory(name="p"))


def _month_hours(quota, now) -> Decimal:
    [usage] = quota_usage([quota.tenant_id], now=now)
    return usage.used.gpu_hours


def test_an_open_slice_is_billed_until_now_not_midnight(quota, alice):
    dev = UserFactory(username="dev", password=None)
    placed = timezone.now() - timedelta(minutes=30)
    held_allocation(quota.tenant, quota.pool, dev, placed, compute_pct=20, memory_mib=4096)
    report = accounting.monthly(timezone.localdate().replace(day=1), alice)
    # 0.2 card for half an hour; the bug billed 0.2 card until midnight.
    assert Decimal("0.0999") <= report.total.gpu_hours <= Decimal("0.1002")
    assert Decimal("1.9999") <= report.total.memory_gib_hours <= Decimal("2.0004")


def test_a_later_read_counts_the_time_since(quota, alice):
    # All within today: past days are written once (by the accounting task or a first
    # read) and never change in production, so a move across midnight would not show.
    now = timezone.localtime()
    today = now - now.replace(hour=0, minute=0, second=0, microsecond=0)
    start = min(timedelta(minutes=6), today / 2)
    back = min(timedelta(hours=1), today - start - timedelta(seconds=1))
    dev = UserFactory(username="dev", password=None)
    held_allocation(quota.tenant, quota.pool, dev, now - start)
    month = now.date().replace(day=1)
    first = accounting.monthly(month, alice).total.gpu_hours
    # The slice's placement moves back: a second read must not serve the first's day.
    Allocation.objects.update(placed_at=now - start - back)
    second = accounting.monthly(month, alice).total.gpu_hours
    expected = Decimal(back.total_seconds()) / 3600
    assert second - first == pytest.approx(expected, abs=Decimal("0.001"))


# One slice: where it starts and ends, as fractions of the time from a little before the
# month's start until now (None: still held), and its size.
slices = st.lists(
    st.tuples(
        st.floats(0, 1),
        st.one_of(st.none(), st.floats(0, 1)),
        st.integers(1, 100),
        st.integers(1, 81920),
        st.booleans(),
    ),
    min_size=1,
    max_size=5,
)


# Each example rolls its rows back, so the function-scoped quota is the same for all.
@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(slices=slices)
def test_the_month_bills_what_the_quota_counts(quota, alice, slices):
    dev = UserFactory.build(username="dev")
    now = timezone.now()
    month = timezone.localdate().replace(day=1)
    origin = accounting._bounds(month) - timedelta(hours=6)  # some start last month
    span = now - origin
    with transaction.atomic():
        dev.save()
        for start, end, pct, mib, whole in slices:
            placed = origin + span * start
            released = None if end is None else origin + span * max(start, end)
            if released is not None and released <= placed:
                released = placed + timedelta(seconds=1)
            held_allocation(quota.tenant, quota.pool, dev, placed, min(released or now, now)
                            if released else None, compute_pct=pct, memory_mib=mib,
                            whole_card=whole)  # fmt: skip
        before = timezone.now()
        report = accounting.monthly(month, alice)
        after = timezone.now()
        low, high = _month_hours(quota, before), _month_hours(quota, after)
        days = len(report.days)
        rounding = Decimal("0.0001") * days  # each day's row is kept to 1/10000 GPU-hour
        assert low - rounding <= report.total.gpu_hours <= high + rounding
        transaction.set_rollback(True)
