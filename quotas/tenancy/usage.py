"""What tenants hold and have used in each pool, against their quotas.

**Held now**: the tenant's live allocations (active, or stranded and waiting for
re-placement): vGPUs, compute points (a whole card is 100) and memory MiB.

**GPU-hours** in the quota's budget period (the calendar month, in the portal's time
zone, or the last 30 days): each allocation's placed time inside the period, weighted by
its share of a card. A whole card counts 1 GPU-hour per hour; a slice counts
``compute_pct / 100`` per hour (a 25 % slice held 4 hours is 1 GPU-hour). The time runs
from ``placed_at`` to ``released_at`` (or now), whatever the allocation's state, plus the
stretches it held before a move or a strand (``pools.models.AllocationSpan``, each at
the size it had then); a stranded allocation (``placed_at`` None) holds no time.

Every function answers for many tenants with a fixed number of aggregate queries (held:
one; GPU-hours: two, over the allocations and over their earlier spans, both periods
summed side by side), never one query per tenant.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import (
    Count,
    DecimalField,
    DurationField,
    ExpressionWrapper,
    F,
    Func,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone

from pools.choices import AllocationState
from pools.models import SHARE_PCT, Allocation, AllocationSpan
from quotas.choices import BudgetPeriod
from quotas.models import Quota

LIVE = (AllocationState.ACTIVE, AllocationState.STRANDED)
ROLLING_DAYS = 30
# Card-percent-seconds in one GPU-hour: 100 % of a card for 3600 s.
PCT_SECONDS_PER_GPU_HOUR = Decimal(360000)
HOURS = Decimal("0.0001")  # GPU-hours are kept to 1/10000 (0.36 s of a whole card)

TENANT = "lease__gpu_request__tenant_id"
REQUESTER = "lease__gpu_request__requester_id"


@dataclass(slots=True)
class Usage:
    """What is held now and what was used in the budget period (the request service
    uses the first three alone, for what is held or asked)."""

    vgpus: int = 0
    compute_pct: int = 0
    memory_mib: int = 0
    gpu_hours: Decimal = Decimal(0)


@dataclass(slots=True)
class QuotaUsage:
    """One tenant's quota in one pool with its usage, and what each member holds there."""

    quota: Quota
    used: Usage
    period_start: datetime
    members: dict[int, Usage] = field(default_factory=dict)

    def dimensions(self) -> list[tuple[str, int | Decimal, int, int]]:
        """(key, used, guarantee, limit) per dimension, for bars and tables."""
        q, u = self.quota, self.used
        return [
            ("vgpus", u.vgpus, q.guaranteed_vgpus, q.limit_vgpus),
            ("compute_pct", u.compute_pct, q.guaranteed_compute_pct, q.limit_compute_pct),
            ("memory_mib", u.memory_mib, q.guaranteed_memory_mib, q.limit_memory_mib),
            ("gpu_hours", u.gpu_hours, q.guaranteed_gpu_hours, q.limit_gpu_hours),
        ]


def period_start(period: str, now: datetime) -> datetime:
    """Where the budget period that holds ``now`` begins."""
    if period == BudgetPeriod.ROLLING_30:
        return now - timedelta(days=ROLLING_DAYS)
    local = timezone.localtime(now)
    return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


class _Epoch(Func):
    """An interval's length in seconds (exact: PostgreSQL answers a numeric)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
    output_field = DecimalField()


def _pct_seconds(start: datetime, now: datetime, weight=SHARE_PCT) -> Sum:
    """Card-percent-seconds (or ``weight``-seconds) inside ``[start, now)``, summed."""
    end = Least(Coalesce(F("released_at"), Value(now)), Value(now))
    held = ExpressionWrapper(
        end - Greatest(F("placed_at"), Value(start)), output_field=DurationField()
    )
    inside = Q(placed_at__lt=now) & (Q(released_at__isnull=True) | Q(released_at__gt=start))
    return Sum(_Epoch(held) * weight, filter=inside, output_field=DecimalField())


def _sums(
    allocations: QuerySet[Allocation],
    keys: tuple[str, ...],
    start: datetime,
    end: datetime,
    **sums: Sum,
) -> dict[tuple, dict[str, Decimal]]:
    """Per ``keys`` group, the ``sums`` (``_pct_seconds`` over ``[start, end)``) of the
    allocations' open stretches and of their earlier spans, added; two queries."""
    out: dict[tuple, dict[str, Decimal]] = {}
    spans = AllocationSpan.objects.filter(allocation__in=allocations.values("pk"))
    for rows, prefix in (
        (allocations.filter(placed_at__isnull=False), ""),
        (spans, "allocation__"),
    ):
        names = [prefix + k for k in keys]
        inside = rows.filter(placed_at__lt=end).filter(
            Q(released_at__isnull=True) | Q(released_at__gt=start)
        )
        # No keys: one total (``values()`` without names would group by every column).
        found = [inside.aggregate(**sums)] if not keys else (
            inside.values(*names).annotate(**sums).order_by()
        )  # fmt: skip
        for row in found:
            into = out.setdefault(tuple(row[n] for n in names), dict.fromkeys(sums, Decimal(0)))
            for name in sums:
                into[name] += row[name] or Decimal(0)
    return out


def _hours(pct_seconds: Decimal | None) -> Decimal:
    return ((pct_seconds or Decimal(0)) / PCT_SECONDS_PER_GPU_HOUR).quantize(HOURS)


def _aggregate(
    allocations: QuerySet[Allocation], keys: tuple[str, ...], now: datetime
) -> dict[tuple, tuple[Usage, Usage]]:
    """Per ``keys`` group: (usage with the month's GPU-hours, the same with the rolling
    30 days'); two queries whatever the number of groups."""
    month, rolling = (period_start(p, now) for p in (BudgetPeriod.MONTH, BudgetPeriod.ROLLING_30))
    out: dict[tuple, tuple[Usage, Usage]] = {}
    held = (
        allocations.filter(state__in=LIVE)
        .values(*keys)
        .annotate(n=Count("id"), c=Sum("compute_pct"), m=Sum("memory_mib"))
        .order_by()
    )
    for row in held:
        key = tuple(row[k] for k in keys)
        out[key] = (
            Usage(row["n"], row["c"] or 0, row["m"] or 0),
            Usage(row["n"], row["c"] or 0, row["m"] or 0),
        )
    # Allocations alive at some time in the longer of the two periods.
    earliest = min(month, rolling)
    hours = _sums(
        allocations, keys, earliest, now,
        month=_pct_seconds(month, now), rolling=_pct_seconds(rolling, now),
    )  # fmt: skip
    for key, row in hours.items():
        by_month, by_rolling = out.setdefault(key, (Usage(), Usage()))
        by_month.gpu_hours = _hours(row["month"])
        by_rolling.gpu_hours = _hours(row["rolling"])
    return out


def _pick(pair: tuple[Usage, Usage] | None, quota: Quota) -> Usage:
    if pair is None:
        return Usage()
    return pair[1] if quota.budget_period == BudgetPeriod.ROLLING_30 else pair[0]


def quota_usage(
    tenant_ids: Iterable[int] | None = None,
    *,
    now: datetime | None = None,
    members: bool = False,
) -> list[QuotaUsage]:
    """Each quota of these tenants (all tenants for None) with its usage; ``members``
    adds each member's share. A fixed number of queries for any number of tenants."""
    now = now or timezone.now()
    quotas = Quota.objects.select_related("tenant", "pool").order_by("tenant__name", "pool__name")
    allocations = Allocation.objects.filter(**{f"{TENANT}__isnull": False})
    if tenant_ids is not None:
        ids = list(tenant_ids)
        quotas = quotas.filter(tenant_id__in=ids)
        allocations = allocations.filter(**{f"{TENANT}__in": ids})
    quotas = list(quotas)
    if not quotas:
        return []
    totals = _aggregate(allocations, (TENANT, "pool_id"), now)
    per_member: dict[tuple[int, int], dict[int, tuple[Usage, Usage]]] = {}
    if members:
        groups = _aggregate(allocations, (TENANT, "pool_id", REQUESTER), now)
        for (tenant_id, pool_id, user_id), pair in groups.items():
            per_member.setdefault((tenant_id, pool_id), {})[user_id] = pair
    result = []
    for quota in quotas:
        key = (quota.tenant_id, quota.pool_id)
        result.append(
            QuotaUsage(
                quota=quota,
                used=_pick(totals.get(key), quota),
                period_start=period_start(quota.budget_period, now),
                members={uid: _pick(p, quota) for uid, p in per_member.get(key, {}).items()},
            )
        )
    return result


def gpu_hours_left(quota: Quota, now: datetime | None = None) -> Decimal | None:
    """GPU-hours left of ``quota``'s budget in its current period: its ``limit_gpu_hours``
    less what the tenant used in the pool, never below 0; None when it sets no GPU-hour
    budget (a limit of 0). The request service calls it holding the quota row's lock."""
    if not quota.limit_gpu_hours:
        return None
    now = now or timezone.now()
    start = period_start(quota.budget_period, now)
    allocations = Allocation.objects.filter(**{TENANT: quota.tenant_id}, pool_id=quota.pool_id)
    rows = _sums(allocations, (), start, now, s=_pct_seconds(start, now))
    used = rows[()]["s"] if rows else None
    return max(Decimal(quota.limit_gpu_hours) - _hours(used), Decimal(0))


def ask_hours(count: int, compute_pct: int, hours: int) -> Decimal:
    """GPU-hours that holding ``count`` vGPUs of ``compute_pct`` (``share_pct``: 100 for
    whole cards) for ``hours`` costs."""
    return Decimal(count * compute_pct * hours) / 100


@dataclass(frozen=True, slots=True)
class Held:
    """What a group held over a period: GPU-hours (as the quotas count them) and
    memory-GiB-hours."""

    gpu_hours: Decimal
    memory_gib_hours: Decimal


MIB_SECONDS_PER_GIB_HOUR = Decimal(1024 * 3600)


def held_hours(
    keys: tuple[str, ...], start: datetime, end: datetime, tenant_ids: Iterable[int] | None = None
) -> dict[tuple, Held]:
    """Per ``keys`` group of allocations held for requests (e.g. ``TENANT``, ``REQUESTER``,
    ``"pool_id"``): what they held inside ``[start, end)``; two queries. The accounting
    reports call it per day and per month, so they count GPU-hours exactly as quotas do
    (the spans held before a move included)."""
    allocations = Allocation.objects.filter(**{f"{TENANT}__isnull": False})
    if tenant_ids is not None:
        allocations = allocations.filter(**{f"{TENANT}__in": tenant_ids})
    # An open allocation is held until now, not until ``end``: today's day must not bill
    # the hours left before midnight.
    end = min(end, timezone.now())
    if end <= start:
        return {}
    rows = _sums(
        allocations, keys, start, end,
        pct=_pct_seconds(start, end), mib=_pct_seconds(start, end, F("memory_mib")),
    )  # fmt: skip
    return {
        key: Held(_hours(row["pct"]), (row["mib"] / MIB_SECONDS_PER_GIB_HOUR).quantize(HOURS))
        for key, row in rows.items()
    }
