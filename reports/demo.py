"""The demo's reports (``manage.py demo``): the demo pool's reclaim policy and unit prices,
as a platform admin would set them in Django's admin (validated, audited as there), created
once and kept across restarts. With them the idle report warns the owner of the demo's
idle allocation at its first scan, and the accounting page prices the day's GPU-hours.
Wired in by the project's demo command."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction

from audit.interface import record, snapshot
from pools.models import Pool
from reports.models import ReclaimPolicy, UnitPrice

# Idle after an hour under 5 % and 10 % of its memory; warned, and released a day later.
POLICY = {"idle_util_pct": 5, "idle_memory_pct": 10, "idle_window_minutes": 60,
          "reclaim": True, "grace_hours": 24}  # fmt: skip
PRICES = {"currency": "CNY", "per_gpu_hour": Decimal("18.00"),
          "per_memory_gib_hour": Decimal("0.02")}  # fmt: skip


@transaction.atomic
def seed(admin, pool: Pool) -> None:
    for model, action, values in (
        (ReclaimPolicy, "reclaim_policy.create", POLICY),
        (UnitPrice, "unit_price.create", PRICES),
    ):
        if model.objects.filter(pool=pool).exists():
            continue
        row = model(pool=pool, **values)
        row.full_clean()
        row.save()
        record(action, row, actor=admin, after=snapshot(row))
