"""Usage against quotas: what tenants hold now and the GPU-hours of their budget period,
exact to the minute for a constructed history, in a fixed number of queries."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from pools.choices import AllocationState
from quotas.choices import BudgetPeriod
from quotas.models import Quota
from quotas.tenancy.usage import gpu_hours_left, period_start, quota_usage
from tests.factories import (
    PoolFactory,
    QuotaFactory,
    TenantFactory,
    UserFactory,
    held_allocation,
)

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)


def at(day: int, hour: int, minute: int = 0, month: int = 3) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


@pytest.fixture
def history():
    """A tenant's month in one pool, and a neighbour's allocation in the same pool."""
    tenant, other, pool = TenantFactory(), TenantFactory(), PoolFactory()
    frank, grace = UserFactory(username="frank"), UserFactory(username="grace")
    quota = QuotaFactory(tenant=tenant, pool=pool, limit_gpu_hours=10)
    QuotaFactory(tenant=other, pool=pool)
    # A whole card across the month's start: 1 h before it, 1 h 30 min in it.
    held_allocation(tenant, pool, frank, at(28, 23, month=2), at(1, 1, 30), whole_card=True)
    # A 30 % slice for 2 h 10 min: 130 min x 0.3 = 39 min = 0.65 GPU-hours.
    held_allocation(tenant, pool, frank, at(10, 10), at(10, 12, 10), compute_pct=30)
    # A 50 % slice held for the last hour, still held: 0.5 GPU-hours, and held now.
    held_allocation(tenant, pool, grace, at(15, 11), compute_pct=50, memory_mib=8192)
    # Long before either period: nothing.
    held_allocation(tenant, pool, frank, at(5, 0, month=1), at(5, 9, month=1), whole_card=True)
    # Another tenant's card: never this tenant's.
    held_allocation(other, pool, frank, at(2, 0), at(3, 0), whole_card=True)
    return tenant, other, pool, quota, frank, grace


def test_the_calendar_month_counts_whole_cards_and_slices_exact_to_the_minute(history):
    tenant, _other, _pool, _quota, frank, grace = history
    [usage] = quota_usage([tenant.pk], now=NOW, members=True)
    assert usage.used.gpu_hours == Decimal("2.65")  # 1.5 + 0.65 + 0.5
    assert usage.members[frank.pk].gpu_hours == Decimal("2.15")
    assert usage.members[grace.pk].gpu_hours == Decimal("0.5")
    assert usage.period_start == at(1, 0)


def test_a_rolling_30_day_budget_reaches_into_the_month_before(history):
    tenant, _other, _pool, quota, _frank, _grace = history
    quota.budget_period = BudgetPeriod.ROLLING_30
    quota.save()
    [usage] = quota_usage([tenant.pk], now=NOW)
    # The whole card's hour before the month's start counts too.
    assert usage.used.gpu_hours == Decimal("3.65")
    assert usage.period_start == at(13, 12, month=2)


def test_what_is_held_now_counts_live_and_stranded_allocations_only(history):
    tenant, _other, pool, _quota, frank, grace = history
    stranded = held_allocation(tenant, pool, frank, at(15, 10), compute_pct=20, memory_mib=100)
    stranded.state = AllocationState.STRANDED
    stranded.save()
    [usage] = quota_usage([tenant.pk], now=NOW, members=True)
    assert (usage.used.vgpus, usage.used.compute_pct, usage.used.memory_mib) == (2, 70, 8292)
    assert usage.members[grace.pk].vgpus == 1 and usage.members[frank.pk].compute_pct == 20


def test_the_gpu_hours_left_are_the_budget_less_the_periods_use(history):
    _tenant, other, pool, quota, _frank, _grace = history
    # What the usage pages show as used (2.65) is what the request check counts.
    assert gpu_hours_left(quota, NOW) == Decimal("7.35")
    # The neighbour's day on a whole card is 24 GPU-hours of its 1000.
    assert gpu_hours_left(Quota.objects.get(tenant=other, pool=pool), NOW) == Decimal("976")


def test_an_exhausted_budget_leaves_zero_never_less(history):
    _tenant, _other, _pool, quota, _frank, _grace = history
    quota.limit_gpu_hours = 1
    quota.guaranteed_gpu_hours = 0
    quota.save()
    assert gpu_hours_left(quota, NOW) == Decimal(0)


def test_the_month_begins_at_midnight_in_the_portals_time_zone(settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    start = period_start(BudgetPeriod.MONTH, datetime(2026, 3, 31, 20, 0, tzinfo=UTC))
    # 20:00 UTC on 31 March is already 1 April in Shanghai.
    assert start == datetime(2026, 3, 31, 16, 0, tzinfo=UTC)


def test_many_tenants_cost_the_same_few_queries():
    pool = PoolFactory()
    user = UserFactory()
    tenants = [TenantFactory() for _ in range(12)]
    for tenant in tenants:
        QuotaFactory(tenant=tenant, pool=pool)
        held_allocation(tenant, pool, user, at(14, 0), compute_pct=10)
    with CaptureQueriesContext(connection) as queries:
        usages = quota_usage(now=NOW, members=True)
    assert len(usages) == 12 and all(u.used.vgpus == 1 for u in usages)
    assert all(u.used.gpu_hours == Decimal("3.6") for u in usages)  # 36 h x 0.1
    assert len(queries) <= 7  # quotas; held and GPU-hours (allocations, spans) twice


def test_a_quota_without_a_gpu_hour_limit_sets_no_budget(history):
    _tenant, _other, _pool, quota, _frank, _grace = history
    quota.limit_gpu_hours = quota.guaranteed_gpu_hours = 0
    quota.save()
    assert gpu_hours_left(quota, NOW) is None
