"""The idle scan (beat, every few minutes): reads the rollups and the agents' latest
reports, applies the pure rules (``reports.idle``) to every live allocation and card,
and stores the verdicts (``AllocationIdle``, ``IdleCard``) that the pages, the API, the
reclaim step and the digest read.

A fixed number of queries whatever the fleet: the allocations, the pools' cards, the
minutes of the longest idle window, a week of hours for the p95s, the latest reports.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from pools.choices import AllocationState
from pools.models import Allocation, PoolCard
from reports import idle
from reports.choices import CardState
from reports.models import AllocationIdle, IdleCard, ReclaimPolicy
from telemetry.interface import (
    Attribution,
    attributed_use,
    latest,
    owners_seen,
)

TENANT = "lease__gpu_request__tenant_id"
P95_RANGE = timedelta(days=7)
P95_EVERY_MINUTES = 5  # the scans in the first minutes of an hour recompute the p95s
SPARK_POINTS = 24


@dataclass(frozen=True, slots=True)
class ScanResult:
    allocations: int
    idle: int
    cards: int


def thresholds_by_pool() -> dict[int, idle.Thresholds]:
    return {
        p.pool_id: idle.Thresholds(p.idle_util_pct, p.idle_memory_pct, p.window)
        for p in ReclaimPolicy.objects.all()
    }


def _live_memory(readings: dict) -> tuple[dict[str, float], dict[str, set[str]]]:
    """From the agents' latest reports: memory used per allocation (by the agent's id)
    and, per card UUID, the users of processes outside any allocation."""
    used: dict[str, float] = {}
    foreign: dict[str, set[str]] = defaultdict(set)
    for reading in readings.values():
        for report in reading.allocations:
            if report.get("memory_used_mib") is not None:
                used[report["allocation_id"]] = float(report["memory_used_mib"])
        for violation in reading.violations:
            if violation.get("kind") == "unallocated" and violation.get("gpu_uuid"):
                foreign[violation["gpu_uuid"]].add(violation.get("user") or "?")
    return used, foreign


def _advice(row: dict, p95_util: float | None, p95_memory: float | None) -> dict:
    advice = idle.right_size(
        row["compute_pct"], row["memory_mib"], row["whole_card"], p95_util, p95_memory
    )
    return {
        "p95_util_pct": p95_util, "p95_memory_mib": p95_memory,
        "over_provisioned": bool(advice and advice.over_provisioned),
        "advice_compute_pct": advice.compute_pct if advice else None,
        "advice_memory_mib": advice.memory_mib if advice else None,
    }  # fmt: skip


def _attribution(row: dict, since: datetime, thresholds: idle.Thresholds | None = None,
                 now: datetime | None = None) -> Attribution:  # fmt: skip
    owner = None if row["whole_card"] else row["lease__unix_user"]
    if thresholds is None or now is None:
        return Attribution(row["id"], row["gpu_id"], owner, since)
    return Attribution(
        row["id"], row["gpu_id"], owner, since, util_pct=thresholds.util_pct,
        memory_mib=row["memory_mib"] * thresholds.memory_pct / 100,
        window_start=max(since, now - thresholds.window),
    )  # fmt: skip


def _judged(rows, policies, default, start, now, previous, live_used, carried):
    """The verdicts, sparklines and week's p95s summed by PostgreSQL: a few statements
    over the rollups, and Python per allocation only for the rules' arithmetic."""
    seen = attributed_use(
        [_attribution(r, r["placed_at"], policies.get(r["pool_id"], default), now) for r in rows],
        start, now, "1m", spark_points=SPARK_POINTS,
    )  # fmt: skip
    fresh = [r for r in rows if r["id"] not in carried]
    weeks = attributed_use(
        [_attribution(r, r["placed_at"].replace(minute=0)) for r in fresh],
        now - P95_RANGE, now, "1h", p95=True,
    )  # fmt: skip
    empty = [None] * SPARK_POINTS
    for row in rows:
        thresholds = policies.get(row["pool_id"], default)
        got = seen.get(row["id"])
        use = idle.AllocationUse(
            allocation_id=row["id"], compute_pct=row["compute_pct"],
            memory_mib=row["memory_mib"], whole_card=row["whole_card"],
            placed_at=row["placed_at"],
            live_memory_mib=live_used.get(f"alloc-{row['id']}"),
            previous_since=previous.get(row["id"]),
        )  # fmt: skip
        summary = idle.Seen(
            got.last_busy if got else None, got.first_read if got else None,
            got.read_in_window if got else 0,
        )  # fmt: skip
        if row["id"] in carried:
            week = carried[row["id"]]
        else:
            hours = weeks.get(row["id"])
            week = _advice(
                row, hours.p95_util_pct if hours else None, hours.p95_memory_mib if hours else None
            )
        yield (row, idle.judge(use, summary, thresholds, now), week,
               list(got.sparkline) if got else list(empty))  # fmt: skip


def _running(gpu_ids, start, now) -> dict[int, set[str]]:
    """Per card, the owners whose processes held memory on it in the window."""
    running: dict[int, set[str]] = defaultdict(set)
    for gpu_id, owner in owners_seen(gpu_ids, start, now):
        running[gpu_id].add(owner)
    return running


def scan(now: datetime | None = None, *, p95: bool | None = None) -> ScanResult:
    """Judge every live allocation and pool card now; replace the stored verdicts.
    ``p95``: recompute the week's p95s for all (True), only for new allocations
    (False), or by the clock (None: the first scan of each hour)."""
    now = (now or timezone.now()).replace(second=0, microsecond=0)
    policies = thresholds_by_pool()
    default = idle.Thresholds()
    longest = max([t.window for t in policies.values()] + [default.window])
    rows = list(
        Allocation.objects.filter(
            state=AllocationState.ACTIVE, gpu__isnull=False, placed_at__isnull=False
        ).values(
            "id", "lease_id", "pool_id", "gpu_id", "gpu__node_id", "gpu__uuid", "compute_pct",
            "memory_mib", "whole_card", "placed_at", "lease__unix_user", TENANT,
        )
    )  # fmt: skip
    pool_cards = list(PoolCard.objects.values("gpu_id", "pool_id", "gpu__node_id", "gpu__uuid"))
    gpu_ids = sorted({c["gpu_id"] for c in pool_cards} | {r["gpu_id"] for r in rows})
    start = now - longest
    # The week's p95s move slowly: recomputed by the first scan of each hour, and for
    # allocations that have none yet; carried over by the other scans.
    recompute = p95 if p95 is not None else now.minute < P95_EVERY_MINUTES
    carried = {} if recompute else {
        r["allocation_id"]: r
        for r in AllocationIdle.objects.values(
            "allocation_id", "p95_util_pct", "p95_memory_mib", "over_provisioned",
            "advice_compute_pct", "advice_memory_mib",
        )
    }  # fmt: skip
    node_ids = {c["gpu__node_id"] for c in pool_cards} | {r["gpu__node_id"] for r in rows}
    live_used, foreign = _live_memory(latest(node_ids))
    # A run seen by a scan whose range reached this one's carries on (no unread gap).
    previous = dict(
        AllocationIdle.objects.filter(scanned_at__gte=start, quiet_since__isnull=False).values_list(
            "allocation_id", "quiet_since"
        )
    )

    states = []
    idle_by_gpu: dict[int, list[bool]] = defaultdict(list)
    owners_by_gpu: dict[int, set[str]] = defaultdict(set)
    for row, verdict, week, spark in _judged(
        rows, policies, default, start, now, previous, live_used, carried
    ):
        idle_by_gpu[row["gpu_id"]].append(verdict.idle)
        owners_by_gpu[row["gpu_id"]].add(row["lease__unix_user"])
        states.append(
            AllocationIdle(
                allocation_id=row["id"], lease_id=row["lease_id"], pool_id=row["pool_id"],
                tenant_id=row[TENANT], node_id=row["gpu__node_id"], idle=verdict.idle,
                idle_since=verdict.idle_since, quiet_since=verdict.quiet_since,
                idle_minutes=verdict.idle_minutes,
                wasted_gpu_hours=verdict.wasted_gpu_hours, coverage=verdict.coverage,
                p95_util_pct=week["p95_util_pct"], p95_memory_mib=week["p95_memory_mib"],
                over_provisioned=week["over_provisioned"],
                advice_compute_pct=week["advice_compute_pct"],
                advice_memory_mib=week["advice_memory_mib"],
                sparkline=spark, scanned_at=now,
            )
        )  # fmt: skip

    running = _running(gpu_ids, start, now)
    cards = []
    for card in pool_cards:
        gpu_id = card["gpu_id"]
        # Processes of no allocation's owner: the agent's "unallocated" violations now,
        # and owners seen in the window on a card where they hold nothing.
        others = set(foreign.get(card["gpu__uuid"], ())) | (running[gpu_id] - owners_by_gpu[gpu_id])
        if others:
            state = CardState.FOREIGN
        elif gpu_id not in idle_by_gpu:
            state = CardState.UNALLOCATED
        elif all(idle_by_gpu[gpu_id]):
            state = CardState.IDLE
        else:
            continue
        cards.append(
            IdleCard(
                gpu_id=gpu_id, pool_id=card["pool_id"], node_id=card["gpu__node_id"],
                state=state, users=", ".join(sorted(others))[:255], scanned_at=now,
            )
        )  # fmt: skip

    with transaction.atomic():
        AllocationIdle.objects.all().delete()
        AllocationIdle.objects.bulk_create(states, batch_size=5000)
        IdleCard.objects.all().delete()
        IdleCard.objects.bulk_create(cards, batch_size=5000)
    return ScanResult(len(states), sum(s.idle for s in states), len(cards))
