"""The reports' panel of the fleet dashboard: the tenants that held the most GPU-hours
over the last days, and those that used the most (busy time on their cards), read from
the accounting's day rows (``UsageDay``, which beat writes for today every quarter hour;
the panel does not write any). For those who see every tenant's accounting (platform
admins, pool managers; ``reports.permissions.sees_everything``). Two queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

from django.db.models import Sum
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone

from quotas.models import Tenant
from reports.models import UsageDay
from reports.permissions import sees_everything

WINDOW_DAYS = 7
SHOWN = 5


@dataclass(frozen=True, slots=True)
class TenantHours:
    tenant_id: int
    name: str
    held_gpu_hours: Decimal
    used_gpu_hours: float

    @property
    def used_share(self) -> float | None:
        """Used over held: how much of what the tenant held it kept busy."""
        return (
            float(self.used_gpu_hours) / float(self.held_gpu_hours) if self.held_gpu_hours else None
        )


@dataclass(frozen=True, slots=True)
class TopTenants:
    since: date
    by_held: list[TenantHours]
    by_used: list[TenantHours]


def top_tenants(
    days: int = WINDOW_DAYS, limit: int = SHOWN, today: date | None = None
) -> TopTenants:
    """The ``limit`` tenants with the most GPU-hours held, and used, over the ``days``
    days up to ``today`` (today included, as far as beat has written it)."""
    since = (today or timezone.localdate()) - timedelta(days=days - 1)
    rows = (
        UsageDay.objects.filter(day__gte=since)
        .exclude(tenant_id=0)
        .values("tenant_id")
        .annotate(held=Sum("gpu_hours"), used=Sum("used_gpu_hours"))
        .order_by()
    )
    sums = {r["tenant_id"]: (r["held"] or Decimal(0), r["used"] or 0.0) for r in rows}
    names = dict(Tenant.objects.filter(pk__in=sums).values_list("pk", "name"))
    every = [
        TenantHours(pk, names.get(pk, f"#{pk}"), held, round(used, 2))
        for pk, (held, used) in sums.items()
    ]
    by_held = sorted(
        (t for t in every if t.held_gpu_hours), key=lambda t: (-t.held_gpu_hours, t.name)
    )
    by_used = sorted(
        (t for t in every if t.used_gpu_hours), key=lambda t: (-t.used_gpu_hours, t.name)
    )
    return TopTenants(since, by_held[:limit], by_used[:limit])


def dashboard_panel(request: HttpRequest) -> str:
    if not sees_everything(request.user):
        return ""
    return render_to_string(
        "reports/_dashboard_panel.html",
        {"top": top_tenants(), "days": WINDOW_DAYS},
        request=request,
    )
