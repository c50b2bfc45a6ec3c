"""The GPU-hour budget check for requests, over the one accounting in ``quotas.usage``.

A slice counts ``compute_pct / 100`` GPU-hours per hour held (a whole card 1). A quota
whose ``limit_gpu_hours`` is 0 sets no GPU-hour budget: its vGPU, compute and memory
limits still hold.
"""

from __future__ import annotations

from datetime import datetime

from quotas.models import Quota
from quotas.usage import gpu_hours_used


def gpu_hours_left(quota: Quota, now: datetime | None = None) -> float | None:
    """GPU-hours left of the quota's budget in its current period; None when the quota
    sets no budget. The caller holds the quota row's lock."""
    if not quota.limit_gpu_hours:
        return None
    used = gpu_hours_used(quota.tenant_id, quota.pool_id, now=now)
    return float(quota.limit_gpu_hours - used)


def ask_hours(count: int, compute_pct: int, hours: int) -> float:
    """What holding ``count`` slices of ``compute_pct`` for ``hours`` costs."""
    return count * compute_pct / 100 * hours
