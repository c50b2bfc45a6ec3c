"""Monthly accounting: GPU-hours (and vGPU units: compute-%-hours, memory-GiB-hours)
held and used per tenant, user and pool, per day; chargeback at the admin's unit prices,
the cost of idle time apart; queue waits; right-sizing advice.

Each day is summed once into ``UsageDay`` rows (beat: today and yesterday, every
quarter hour; the report writes again a day not written since it ended), so a month
reads at most 31 rows per (tenant, user, pool).

Held hours come from ``quotas.interface.held_hours`` (the quotas' own GPU-hour count,
exact to the second); used and idle hours from the hour rollups over each allocation's
held time (``telemetry.interface.interval_usage``, one statement for the month).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Max, Q, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from pools.interface import share_pct
from pools.models import Allocation, AllocationSpan, Pool
from quotas.interface import REQUESTER, TENANT, held_hours
from quotas.models import GpuRequest, Tenant
from reports import permissions
from reports.models import AllocationIdle, ReclaimPolicy, UnitPrice, UsageDay
from telemetry.interface import Interval, interval_usage

KEYS = (TENANT, REQUESTER, "pool_id")
ZERO = Decimal(0)
CENTS = Decimal("0.01")
DAY_LOCK = 0x5553  # "US": the advisory-lock class of a UsageDay's day


def parse_month(value: Any) -> date:
    """``YYYY-MM`` (the current month when absent) as the month's first day."""
    if value in (None, ""):
        return timezone.localdate().replace(day=1)
    try:
        year, month = (int(part) for part in str(value).split("-"))
        if len(str(value)) != 7 or not 2000 <= year <= 2100:
            raise ValueError
        return date(year, month, 1)
    except ValueError:
        raise ValidationError({"month": [_("Give a month as YYYY-MM.")]}) from None


def _bounds(day: date) -> datetime:
    return timezone.make_aware(datetime(day.year, day.month, day.day))


@dataclass
class Line:
    tenant: str
    user: str
    pool: str
    gpu_hours: Decimal = ZERO
    memory_gib_hours: Decimal = ZERO
    used_gpu_hours: float = 0.0
    used_memory_gib_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    cost: Decimal = ZERO
    idle_cost: Decimal = ZERO

    @property
    def compute_pct_hours(self) -> Decimal:
        return self.gpu_hours * 100


@dataclass
class MonthReport:
    month: date
    currency: str
    days: list[dict[str, Any]] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    by_tenant: dict[str, Line] = field(default_factory=dict)
    by_pool: dict[str, Line] = field(default_factory=dict)
    total: Line | None = None
    waits: list[dict[str, Any]] = field(default_factory=list)
    advice: list[AllocationIdle] = field(default_factory=list)


def _prices() -> dict[int | None, UnitPrice]:
    return {p.pool_id: p for p in UnitPrice.objects.all()}


def _cost(line: Line, price: UnitPrice | None) -> None:
    if price is None:
        return
    line.cost = (
        line.gpu_hours * price.per_gpu_hour
        + line.compute_pct_hours * price.per_compute_pct_hour
        + line.memory_gib_hours * price.per_memory_gib_hour
    ).quantize(CENTS)
    share = Decimal(str(line.idle_gpu_hours)) / line.gpu_hours if line.gpu_hours else ZERO
    line.idle_cost = (line.cost * min(share, Decimal(1))).quantize(CENTS)


def _add(total: Line, line: Line) -> None:
    total.gpu_hours += line.gpu_hours
    total.memory_gib_hours += line.memory_gib_hours
    total.used_gpu_hours += line.used_gpu_hours
    total.used_memory_gib_hours += line.used_memory_gib_hours
    total.idle_gpu_hours += line.idle_gpu_hours
    total.cost += line.cost
    total.idle_cost += line.idle_cost


def _used(start: datetime, end: datetime, groups: dict[tuple, int]):
    """Used and idle hours per (group, day), from the rollups over the held intervals."""
    policies = {p.pool_id: p for p in ReclaimPolicy.objects.all()}
    allocations = Allocation.objects.filter(
        **{f"{TENANT}__isnull": False}, gpu__isnull=False, placed_at__isnull=False,
        placed_at__lt=end,
    ).filter(Q(released_at__isnull=True) | Q(released_at__gt=start))  # fmt: skip
    # The stretches held before a move or a strand, each on the card it was on then.
    spans = AllocationSpan.objects.filter(
        **{f"allocation__{TENANT}__isnull": False}, gpu__isnull=False, placed_at__lt=end,
        released_at__gt=start,
    )  # fmt: skip
    now = timezone.now()
    intervals = []
    fields = ("gpu_id", "lease__unix_user", "whole_card", "compute_pct", "memory_mib",
              "placed_at", "released_at")  # fmt: skip
    rows = list(allocations.values(*KEYS, *fields))
    own = ("gpu_id", *fields[2:])  # the span's own card and size; the rest its allocation's
    for row in spans.values(*(f"allocation__{k}" for k in (*KEYS, "lease__unix_user")), *own):
        rows.append({k.removeprefix("allocation__"): v for k, v in row.items()})
    for row in rows:
        policy = policies.get(row["pool_id"])
        group = groups.setdefault(tuple(row[k] for k in KEYS), len(groups))
        memory_pct = policy.idle_memory_pct if policy else 10
        intervals.append(
            Interval(
                group=group, gpu_id=row["gpu_id"],
                owner=None if row["whole_card"] else row["lease__unix_user"],
                start=max(row["placed_at"], start),
                end=min(row["released_at"] or now, end, now),
                cap_pct=share_pct(row["whole_card"], row["compute_pct"]),
                idle_util_pct=policy.idle_util_pct if policy else 5,
                idle_memory_mib=row["memory_mib"] * memory_pct / 100,
            )
        )  # fmt: skip
    return interval_usage(intervals, settings.TIME_ZONE)


def materialize_day(day: date) -> int:
    """Write one day's ``UsageDay`` rows (replacing the day's): beat runs it for today
    and yesterday; the report writes again a day not written since it ended. Returns the
    rows written."""
    start, end = _bounds(day), _bounds(day + timedelta(days=1))
    held = held_hours(KEYS, start, end)
    groups: dict[tuple, int] = {key: i for i, key in enumerate(held)}
    used = {group: u for (group, _day), u in _used(start, end, groups).items()}
    now = timezone.now()
    rows = []
    for key, group in groups.items():
        h, u = held.get(key), used.get(group)
        rows.append(
            UsageDay(
                day=day, tenant_id=key[0], user_id=key[1], pool_id=key[2],
                gpu_hours=h.gpu_hours if h else ZERO,
                memory_gib_hours=h.memory_gib_hours if h else ZERO,
                used_gpu_hours=round(u.used_pct_hours / 100, 4) if u else 0.0,
                used_memory_gib_hours=round(u.used_memory_mib_hours / 1024, 4) if u else 0.0,
                idle_gpu_hours=round(u.idle_pct_hours / 100, 4) if u else 0.0,
                computed_at=now,
            )
        )  # fmt: skip
    with transaction.atomic():
        # Beat and a report's reader may both write a day: one after the other, or the
        # second would insert beside the first's rows (the unique key: an IntegrityError).
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [DAY_LOCK, day.toordinal()])
        UsageDay.objects.filter(day=day).delete()
        # A day with nothing held still gets a mark, so the report does not redo it.
        UsageDay.objects.bulk_create(rows or [_EMPTY(day, now)], batch_size=5000)
    return len(rows)


def _EMPTY(day: date, now: datetime) -> UsageDay:
    return UsageDay(day=day, tenant_id=0, user_id=0, pool_id=0, gpu_hours=ZERO,
                    memory_gib_hours=ZERO, computed_at=now)  # fmt: skip


def _refresh(first: date, last: date) -> None:
    """Materialize the days in ``[first, last)`` (up to today) not written since they
    ended: missing ones, and today, so that the report counts held hours to the second,
    as the quotas do, not to beat's last quarter hour."""
    today = timezone.localdate()
    written = dict(
        UsageDay.objects.filter(day__gte=first, day__lt=last)
        .values("day")
        .annotate(at=Max("computed_at"))
        .values_list("day", "at")
    )
    day = first
    while day < last and day <= today:
        if day not in written or written[day] < _bounds(day + timedelta(days=1)):
            materialize_day(day)
        day += timedelta(days=1)


def monthly(month: date, user) -> MonthReport:
    start_day = month
    end_day = (month + timedelta(days=32)).replace(day=1)
    start, end = _bounds(start_day), _bounds(end_day)
    _refresh(start_day, end_day)
    tenant_ids = permissions.visible_tenant_ids(user)
    rows = UsageDay.objects.filter(day__gte=start_day, day__lt=end_day).exclude(tenant_id=0)
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=tenant_ids)
    prices = _prices()
    default_price = prices.get(None)
    report = MonthReport(month=month, currency=default_price.currency if default_price else "")
    sums = {
        "gpu_hours": Sum("gpu_hours"), "memory_gib_hours": Sum("memory_gib_hours"),
        "used_gpu_hours": Sum("used_gpu_hours"),
        "used_memory_gib_hours": Sum("used_memory_gib_hours"),
        "idle_gpu_hours": Sum("idle_gpu_hours"),
    }  # fmt: skip
    groups = list(rows.values("tenant_id", "user_id", "pool_id").annotate(**sums).order_by())
    names = _names({(g["tenant_id"], g["user_id"], g["pool_id"]): 0 for g in groups})
    lines = []
    for g in groups:
        line = Line(
            names[0].get(g["tenant_id"], ""), names[1].get(g["user_id"], ""),
            names[2].get(g["pool_id"], ""), g["gpu_hours"] or ZERO,
            g["memory_gib_hours"] or ZERO, round(g["used_gpu_hours"] or 0, 4),
            round(g["used_memory_gib_hours"] or 0, 4), round(g["idle_gpu_hours"] or 0, 4),
        )  # fmt: skip
        _cost(line, prices.get(g["pool_id"], default_price))
        lines.append(line)
    report.lines = sorted(lines, key=lambda x: (x.tenant, x.user, x.pool))
    report.total = Line("", "", "")
    for line in report.lines:
        _add(report.by_tenant.setdefault(line.tenant, Line(line.tenant, "", "")), line)
        _add(report.by_pool.setdefault(line.pool, Line("", "", line.pool)), line)
        _add(report.total, line)
    per_day = {
        row["day"]: row
        for row in rows.values("day").annotate(**sums).order_by()
    }  # fmt: skip
    day = start_day
    while day < end_day:
        row = per_day.get(day, {})
        report.days.append({
            "day": day.isoformat(), "gpu_hours": float(row.get("gpu_hours") or 0),
            "used_gpu_hours": round(row.get("used_gpu_hours") or 0, 4),
            "idle_gpu_hours": round(row.get("idle_gpu_hours") or 0, 4),
        })  # fmt: skip
        day += timedelta(days=1)
    report.waits = queue_waits(start, end, tenant_ids)
    advice = AllocationIdle.objects.filter(over_provisioned=True).select_related(
        "allocation__gpu__node", "pool", "lease__holder"
    )
    lease_ids = permissions.visible_lease_ids(user)
    if lease_ids is not None:
        advice = advice.filter(lease_id__in=lease_ids)
    report.advice = list(advice.order_by("-allocation__compute_pct", "allocation_id")[:50])
    return report


def _names(groups: dict[tuple, int]) -> list[dict]:
    from django.contrib.auth import get_user_model

    tenant_ids = {k[0] for k in groups}
    user_ids = {k[1] for k in groups}
    pool_ids = {k[2] for k in groups}
    users = get_user_model().objects.filter(pk__in=user_ids)
    return [
        dict(Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "name")),
        {u.pk: u.get_username() for u in users},
        dict(Pool.objects.filter(pk__in=pool_ids).values_list("pk", "name")),
    ]


def queue_waits(start: datetime, end: datetime, tenant_ids) -> list[dict[str, Any]]:
    """How long requests placed in ``[start, end)`` waited in the queue for capacity
    (approved -> placed), per pool and tenant: count, average and longest, in minutes."""
    wait = ExpressionWrapper(F("placed_at") - F("queued_at"), output_field=DurationField())
    rows = GpuRequest.objects.filter(
        queued_at__isnull=False, placed_at__isnull=False, placed_at__gte=start, placed_at__lt=end
    )
    if tenant_ids is not None:
        rows = rows.filter(tenant_id__in=tenant_ids)
    out = []
    for row in (
        rows.values("pool__name", "tenant__name")
        .annotate(avg=Avg(wait), longest=Max(wait), n=Count("pk"))
        .order_by("pool__name", "tenant__name")
    ):
        out.append({
            "pool": row["pool__name"], "tenant": row["tenant__name"], "requests": row["n"],
            "avg_minutes": round(row["avg"].total_seconds() / 60, 1) if row["avg"] else 0.0,
            "max_minutes": round(row["longest"].total_seconds() / 60, 1) if row["longest"] else 0.0,
        })  # fmt: skip
    return out


CSV_COLUMNS = (
    "tenant", "user", "pool", "gpu_hours", "compute_pct_hours", "memory_gib_hours",
    "used_gpu_hours", "used_memory_gib_hours", "idle_gpu_hours", "cost", "idle_cost",
)  # fmt: skip


def csv_text(report: MonthReport) -> str:
    buffer = StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for line in report.lines:
        row = [getattr(line, c) for c in CSV_COLUMNS]
        writer.writerow(["'" + v if isinstance(v, str) and v[:1] in "=+-@" else v for v in row])
    return buffer.getvalue()
