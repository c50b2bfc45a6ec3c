"""The GPU-hour budget: what a tenant's allocations in a pool used in the budget period.

A slice counts ``compute_pct / 100`` GPU-hours per hour held (a whole card 1). One small
function so that the tenancy side's report (quotas.usage) and this check can be one.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from pools.models import Allocation
from quotas.choices import BudgetPeriod
from quotas.models import Quota


def period_start(period: str, now: datetime) -> datetime:
    if period == BudgetPeriod.ROLLING_30:
        return now - timedelta(days=30)
    local = timezone.localtime(now)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def gpu_hours_left(quota: Quota, now: datetime | None = None) -> float | None:
    """GPU-hours left of the quota's budget in the current period; None when the quota
    sets no budget (``limit_gpu_hours`` 0)."""
    if not quota.limit_gpu_hours:
        return None
    now = now or timezone.now()
    start = period_start(quota.budget_period, now)
    rows = (
        Allocation.objects.filter(
            pool_id=quota.pool_id,
            lease__gpu_request__tenant_id=quota.tenant_id,
            placed_at__lt=now,
        )
        .filter(Q(released_at=None) | Q(released_at__gt=start))
        .values_list("placed_at", "released_at", "compute_pct")
    )
    used = 0.0
    for placed, released, compute in rows:
        held = min(released or now, now) - max(placed, start)
        used += max(held.total_seconds(), 0) / 3600 * compute / 100
    return quota.limit_gpu_hours - used


def ask_hours(count: int, compute_pct: int, hours: int) -> float:
    """What holding ``count`` slices of ``compute_pct`` for ``hours`` costs."""
    return count * compute_pct / 100 * hours
