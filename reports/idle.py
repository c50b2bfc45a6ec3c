"""The idle rules: plain functions over plain data (no ORM), so they are tested with
hypothesis, and the scan (``reports.scan``) runs them at fleet scale on what PostgreSQL
summed of each allocation's minutes (``telemetry.interface.attributed_use``: the last
busy minute, the first read, the minutes read in the window, the sparkline and the
week's p95s).

An allocation's use in one minute is what its card's rollup says, attributed to it:
a whole card takes the card's utilization and memory; a slice takes its owner's memory
on the card (the owner rollups) and the card's utilization only in minutes when the
owner had processes there (a card's utilization cannot be split between slices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from pools.interface import share_pct

MINUTE = timedelta(minutes=1)
# At least this share of the window's minutes must have been read before an allocation
# is called idle: a node that stopped answering is not evidence of an idle card.
MIN_COVERAGE = 0.5


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Under both, for ``window``, an allocation is idle (defaults: 5 %, 10 %, 2 hours)."""

    util_pct: float = 5.0
    memory_pct: float = 10.0  # of the allocation's own memory
    window: timedelta = timedelta(hours=2)


@dataclass(frozen=True, slots=True)
class AllocationUse:
    allocation_id: int
    compute_pct: int
    memory_mib: int
    whole_card: bool
    placed_at: datetime
    live_memory_mib: float | None = None  # the agent's latest report, when there is one
    # When the previous scan, whose range reached this one's, saw the run begin: the
    # scan reads only the window's minutes, so a longer run is carried from scan to scan.
    previous_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    idle: bool
    idle_since: datetime | None  # start of the trailing run of unused minutes, when idle
    quiet_since: datetime  # the same run's start, idle or not yet (carried to the next scan)
    idle_minutes: int
    coverage: float  # share of the window's minutes that were read
    wasted_gpu_hours: float  # the run's length x the allocation's share of a card


def memory_limit(use: AllocationUse, thresholds: Thresholds) -> float:
    return use.memory_mib * thresholds.memory_pct / 100


@dataclass(frozen=True, slots=True)
class Seen:
    """What an allocation's minutes read in the scan's range say, summed in SQL by
    ``telemetry.interface.attributed_use`` (a minute is busy at or over either of the
    thresholds: utilization, or ``memory_limit`` of memory)."""

    last_busy: datetime | None  # the last minute at or over either threshold
    first_read: datetime | None
    read_in_window: int  # minutes read since max(placed_at, now - window)


def judge(use: AllocationUse, seen: Seen, thresholds: Thresholds, now: datetime) -> Verdict:
    """Idle when every minute read since ``idle_since`` was under both thresholds, the run
    is at least the window long, enough of the window was read, and the agent's latest
    report (when there is one) does not show the allocation's memory in use."""
    limit = memory_limit(use, thresholds)
    start = max(use.placed_at, now - thresholds.window)
    if seen.last_busy is not None:
        since = seen.last_busy + MINUTE
    elif use.previous_since is not None:
        since = max(use.previous_since, use.placed_at)
    else:
        since = max(use.placed_at, seen.first_read or now)
    since = min(since, now)
    span = max(math.ceil((now - start) / MINUTE), 1)
    coverage = min(seen.read_in_window / span, 1.0)
    live_busy = use.live_memory_mib is not None and use.live_memory_mib >= max(limit, 1.0)
    idle = not live_busy and now - since >= thresholds.window and coverage >= MIN_COVERAGE
    minutes = int((now - since) / MINUTE) if idle else 0
    card_share = share_pct(use.whole_card, use.compute_pct) / 100
    return Verdict(
        idle=idle,
        idle_since=since if idle else None,
        quiet_since=since,
        idle_minutes=minutes,
        coverage=round(coverage, 3),
        wasted_gpu_hours=round(minutes / 60 * card_share, 4),
    )


@dataclass(frozen=True, slots=True)
class Advice:
    over_provisioned: bool
    compute_pct: int  # suggested per vGPU
    memory_mib: int


def right_size(
    compute_pct: int, memory_mib: int, whole_card: bool, p95_util: float | None,
    p95_memory_mib: float | None,
) -> Advice | None:  # fmt: skip
    """Right-sizing from a week's p95 use: over-provisioned when both p95s are under
    half of what is held; the advice is the p95 with a quarter of headroom, rounded up
    to 5 % and 1 GiB. None without readings."""
    if p95_util is None and p95_memory_mib is None:
        return None
    held_compute = share_pct(whole_card, compute_pct)
    util = p95_util or 0.0
    memory = p95_memory_mib or 0.0
    # A slice's utilization is the card's: its own share is at most what it holds.
    used_compute = min(util, held_compute)
    over = used_compute < held_compute / 2 and memory < memory_mib / 2
    suggested_compute = min(max(5 * math.ceil(used_compute * 1.25 / 5), 5), 100)
    suggested_memory = max(1024 * math.ceil(memory * 1.25 / 1024), 1024)
    return Advice(
        over_provisioned=over,
        compute_pct=min(suggested_compute, held_compute),
        memory_mib=min(suggested_memory, memory_mib) if memory_mib else suggested_memory,
    )
