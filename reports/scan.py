"""The idle scan (beat, every few minutes): reads the rollups and the agents' latest
reports, applies the pure rules (``reports.idle``) to every live allocation and card,
and stores the verdicts (``AllocationIdle``, ``IdleCard``) that the pages, the API, the
reclaim step and the digest read.

A fixed number of queries whatever the fleet: the allocations, the pools' cards, the
minutes of the longest idle window, a week of hours for the p95s, the latest reports.
With ``incremental`` (beat's passes) the minutes are those since the last pass's
settled mark, the rest kept from pass to pass (``reports.window``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import orjson
import psycopg
from django.db import connection, transaction
from django.utils import timezone

from pools.choices import AllocationState
from pools.models import Allocation, PoolCard
from reports import idle, window
from reports.choices import CardState
from reports.models import AllocationIdle, IdleCard, ReclaimPolicy
from telemetry.interface import (
    Attribution,
    attributed_minutes,
    attributed_use,
    latest,
    merged_since,
    owners_last_seen,
    rollup_snapshot,
)

TENANT = "lease__gpu_request__tenant_id"
P95_RANGE = timedelta(days=7)
P95_EVERY_MINUTES = 5  # the scans in the first minutes of an hour recompute the p95s
SPARK_POINTS = 24
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class ScanResult:
    allocations: int
    idle: int
    cards: int
    full: bool = True  # every minute of the window read (no usable state)
    stages: dict[str, float] = field(default_factory=dict)  # seconds per stage


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


def _windows(rows, policies, default, state, start, now):
    """Each allocation's minutes over ``[start, now)`` (minute numbers): from the state
    slid forward plus the minutes since its settled mark, or all read afresh (no state, a
    new allocation, or one whose card, owner or thresholds changed)."""
    length = now - start
    fresh, tails, windows = [], [], {}
    for row in rows:
        wanted = _attribution(row, row["placed_at"], policies.get(row["pool_id"], default),
                              window.minute_at(now))  # fmt: skip
        key = (wanted.gpu_id, wanted.owner, row["placed_at"], float(wanted.util_pct),
               float(wanted.memory_mib))  # fmt: skip
        kept = state.kept(row["id"], key) if state else None
        if kept is not None:
            windows[row["id"]] = window.slid(state, kept, start, length)
            tails.append(Attribution(
                wanted.allocation_id, wanted.gpu_id, wanted.owner,
                window.since_for(row["placed_at"], state.settled), wanted.util_pct,
                wanted.memory_mib,
            ))  # fmt: skip
        else:
            windows[row["id"]] = window.empty(start, length, key)
            fresh.append(wanted)
    # Two statements: the kept allocations' newest minutes only (a range of buckets the
    # indexes find), and every minute of the others.
    for group in (tails, fresh):
        packed = attributed_minutes(group, window.minute_at(start), window.minute_at(now))
        for alloc_id, minutes in packed.items():
            window.scatter(windows[alloc_id], minutes)
    return windows


def _judged(rows, policies, default, windows, now, previous, live_used, carried, state, lines):
    """The verdicts and sparklines from each allocation's minutes, and the week's p95s
    summed by PostgreSQL; Python per allocation only for the rules' arithmetic."""
    fresh = [r for r in rows if r["id"] not in carried]
    weeks = attributed_use(
        [_attribution(r, r["placed_at"].replace(minute=0)) for r in fresh],
        now - P95_RANGE, now, "1h", p95=True,
    )  # fmt: skip
    length = len(next(iter(windows.values())).read) if windows else 0
    spark = window.steps(length, SPARK_POINTS)
    start = window.minute_of(now) - length
    reused, shift = window.reusable_steps(state, start, spark)
    for row in rows:
        thresholds = policies.get(row["pool_id"], default)
        use = idle.AllocationUse(
            allocation_id=row["id"], compute_pct=row["compute_pct"],
            memory_mib=row["memory_mib"], whole_card=row["whole_card"],
            placed_at=row["placed_at"],
            live_memory_mib=live_used.get(f"alloc-{row['id']}"),
            previous_since=previous.get(row["id"]),
        )  # fmt: skip
        got = windows[row["id"]]
        kept = state.kept(row["id"], got.key) if reused else None
        drawn = window.old_steps(state, kept, shift, reused) if kept is not None else ()
        summary, line = window.summarize(
            got, max(row["placed_at"], now - thresholds.window), spark, drawn
        )
        lines[row["id"]] = line
        if row["id"] in carried:
            week = carried[row["id"]]
        else:
            hours = weeks.get(row["id"])
            week = _advice(
                row, hours.p95_util_pct if hours else None, hours.p95_memory_mib if hours else None
            )
        yield row, idle.judge(use, summary, thresholds, now), week, line


def _owners(gpu_ids, state, start, settled, now):
    """Per card, the owners whose processes held memory on it in the window, and the
    last-seen minutes to keep (those before ``settled``)."""
    lo, kept, extra = start, {}, {}
    if state is not None:
        cards = set(gpu_ids)
        kept = {pair: last for pair, last in state.owners.items() if pair[0] in cards}
        lo = state.settled
        if added := sorted(set(gpu_ids) - state.gpus):
            extra = owners_last_seen(added, window.minute_at(start), window.minute_at(lo))
    settled_seen = owners_last_seen(gpu_ids, window.minute_at(lo), window.minute_at(settled))
    latest_seen = owners_last_seen(gpu_ids, window.minute_at(settled), window.minute_at(now))
    keep = window.merged_owners(kept, {**extra, **settled_seen}, start)
    running: dict[int, set[str]] = defaultdict(set)
    for gpu_id, owner in window.owners_in_window(keep, start) | latest_seen.keys():
        running[gpu_id].add(owner)
    return running, keep


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _previous(start: datetime) -> dict[int, datetime]:
    """Each allocation's run start as the last pass saw it, when that pass's range
    reached this one's; read as microseconds (20,000 timestamps parsed took 0.3 s)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT allocation_id, (EXTRACT(EPOCH FROM quiet_since) * 1000000)::bigint "
            "FROM reports_allocationidle WHERE scanned_at >= %s AND quiet_since IS NOT NULL",
            [start],
        )
        return {i: _EPOCH + timedelta(microseconds=us) for i, us in cursor.fetchall()}


def _merged_late(state: window.State, start: datetime) -> bool:
    """A minute the state kept was merged again after it was read (samples that came
    late, a flush retried): the pass reads every minute again."""
    late = merged_since(state.snapshot, start)
    return late is not None and window.minute_of(late) < state.settled


class _Stages(dict):
    """Seconds per stage of a pass, for the bench and the logs."""

    @contextmanager
    def __call__(self, name: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self[name] = round(self.get(name, 0.0) + time.perf_counter() - started, 3)


def scan(
    now: datetime | None = None, *, p95: bool | None = None, incremental: bool = False
) -> ScanResult:
    """Judge every live allocation and pool card now; replace the stored verdicts.
    ``p95``: recompute the week's p95s for all (True), only for new allocations
    (False), or by the clock (None: the first scan of each hour). ``incremental``: start
    from the minutes the last pass kept (``reports.window``) when they are still good;
    a pass that recomputes the p95s always reads every minute (a full pass an hour)."""
    stages = _Stages()
    now = (now or timezone.now()).replace(second=0, microsecond=0)
    with stages("inputs"):
        policies = thresholds_by_pool()
        default = idle.Thresholds()
        longest = max([t.window for t in policies.values()] + [default.window])
        rows = list(
            Allocation.objects.filter(
                state=AllocationState.ACTIVE, gpu__isnull=False, placed_at__isnull=False
            ).values(
                "id", "lease_id", "pool_id", "gpu_id", "gpu__node_id", "gpu__uuid",
                "compute_pct", "memory_mib", "whole_card", "placed_at", "lease__unix_user",
                TENANT,
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
        previous = _previous(start)
        # One pass writes every row: any row's time is the last pass's.
        last_scanned = AllocationIdle.objects.values_list("scanned_at", flat=True).first()

    with stages("state"):
        # Taken before the rollups are read: what is merged from here on, the next
        # pass reads again or, when it is older than this pass's settled mark, in full.
        taken = rollup_snapshot()
        now_m, length = window.minute_of(now), int(longest / MINUTE)
        start_m, settled_m = now_m - length, window.settled_at(now_m)
        state = window.load() if incremental and not recompute else None
        if not window.usable(state, now_m, length, last_scanned) or _merged_late(state, start):
            state = None

    with stages("minutes"):
        windows = _windows(rows, policies, default, state, start_m, now_m)
    lines: dict[int, list] = {}
    states = []
    idle_by_gpu: dict[int, list[bool]] = defaultdict(list)
    owners_by_gpu: dict[int, set[str]] = defaultdict(set)
    with stages("judge"):
        for row, verdict, week, spark in _judged(
            rows, policies, default, windows, now, previous, live_used, carried, state, lines
        ):
            idle_by_gpu[row["gpu_id"]].append(verdict.idle)
            owners_by_gpu[row["gpu_id"]].add(row["lease__unix_user"])
            states.append((
                row["id"], row["lease_id"], row["pool_id"], row[TENANT], row["gpu__node_id"],
                verdict.idle, verdict.idle_since, verdict.quiet_since, verdict.idle_minutes,
                verdict.wasted_gpu_hours, verdict.coverage, week["over_provisioned"],
                week["p95_util_pct"], week["p95_memory_mib"], week["advice_compute_pct"],
                week["advice_memory_mib"], orjson.dumps(spark).decode(), now,
            ))  # fmt: skip

    with stages("cards"):
        running, owners = _owners(gpu_ids, state, start_m, settled_m, now_m)
        cards = []
        for card in pool_cards:
            gpu_id = card["gpu_id"]
            # Processes of no allocation's owner: the agent's "unallocated" violations
            # now, and owners seen in the window on a card where they hold nothing.
            others = set(foreign.get(card["gpu__uuid"], ())) | (
                running[gpu_id] - owners_by_gpu[gpu_id]
            )
            if others:
                card_state = CardState.FOREIGN
            elif gpu_id not in idle_by_gpu:
                card_state = CardState.UNALLOCATED
            elif all(idle_by_gpu[gpu_id]):
                card_state = CardState.IDLE
            else:
                continue
            cards.append((gpu_id, card["pool_id"], card["gpu__node_id"], card_state,
                          ", ".join(sorted(others))[:255], now))  # fmt: skip

    with stages("write"), transaction.atomic():
        _replace(AllocationIdle, STATE_COLUMNS, states)
        _replace(IdleCard, CARD_COLUMNS, cards)
    with stages("keep"):
        window.save(
            window.kept_state(
                windows, lines, start_m, settled_m, now=now_m, longest=length, snapshot=taken,
                owners=owners, gpus=frozenset(gpu_ids),
            )
        )  # fmt: skip
    return ScanResult(
        len(states), sum(s[5] for s in states), len(cards), full=state is None, stages=stages
    )


STATE_COLUMNS = (
    "allocation_id", "lease_id", "pool_id", "tenant_id", "node_id", "idle", "idle_since",
    "quiet_since", "idle_minutes", "wasted_gpu_hours", "coverage", "over_provisioned",
    "p95_util_pct", "p95_memory_mib", "advice_compute_pct", "advice_memory_mib", "sparkline",
    "scanned_at",
)  # fmt: skip
CARD_COLUMNS = ("gpu_id", "pool_id", "node_id", "state", "users", "scanned_at")


def _replace(model, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """Replace a snapshot table's rows (inside the caller's transaction) by COPY: a
    20,000-row ``bulk_create`` took over a second of building and binding parameters."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table}")  # noqa: S608
    cursor = psycopg.Cursor(connection.connection)
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)
