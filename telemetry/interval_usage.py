"""What given card intervals used, from the hour rollups, in one SQL statement: the
accounting of the apps above (reports) passes its allocations as intervals, telemetry
answers without knowing them (telemetry.interface.interval_usage).

An interval is a card, a process owner (None: the whole card) and ``[start, end)``;
each hour bucket counts by the share of it inside the interval. Utilization is capped at
the interval's ``cap_pct`` and, for an owner, counted only in hours the owner had
processes on the card (a card's utilization cannot be split between its slices).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

from django.db import connection

from telemetry.models import GpuHour, OwnerHour


@dataclass(frozen=True, slots=True)
class Interval:
    group: int  # the caller's grouping key: results are summed per group and day
    gpu_id: int
    owner: str | None  # None: the whole card is the interval's
    start: datetime
    end: datetime
    cap_pct: int  # at most this much utilization is the interval's (its compute share)
    idle_util_pct: float  # an hour under both is idle
    idle_memory_mib: float


@dataclass(frozen=True, slots=True)
class IntervalUsage:
    hours_read: float  # held hours that had a rollup
    used_pct_hours: float  # utilization-percent-hours, capped (100 = one GPU-hour)
    used_memory_mib_hours: float
    idle_pct_hours: float  # cap_pct-hours of the idle hours read


_SQL = """
WITH iv AS (
  SELECT * FROM unnest(%s::int[], %s::bigint[], %s::text[], %s::timestamptz[],
                       %s::timestamptz[], %s::int[], %s::float8[], %s::float8[])
    AS t(grp, gpu_id, owner, t0, t1, cap, idle_util, idle_mem)
), used AS (
  SELECT iv.grp, iv.cap, iv.idle_util, iv.idle_mem, h.bucket,
    EXTRACT(EPOCH FROM LEAST(h.bucket + interval '1 hour', iv.t1)
                     - GREATEST(h.bucket, iv.t0)) / 3600.0 AS f,
    CASE WHEN iv.owner IS NULL OR o.gpu_id IS NOT NULL
         THEN LEAST(COALESCE(h.util_avg, 0), iv.cap) ELSE 0 END AS util,
    CASE WHEN iv.owner IS NULL THEN COALESCE(h.memory_used_avg_mib, 0)
         ELSE COALESCE(o.memory_used_avg_mib, 0) END AS mem
  FROM iv
  JOIN {hour} h ON h.gpu_id = iv.gpu_id AND h.bucket >= date_trunc('hour', iv.t0)
                AND h.bucket < iv.t1
  LEFT JOIN {owner} o ON iv.owner IS NOT NULL AND o.gpu_id = h.gpu_id
                AND o.bucket = h.bucket AND o.owner = iv.owner
)
SELECT grp, (bucket AT TIME ZONE %s)::date AS day, SUM(f), SUM(f * util), SUM(f * mem),
       SUM(CASE WHEN util < idle_util AND mem < idle_mem THEN f * cap ELSE 0 END)
FROM used GROUP BY 1, 2
"""


def interval_usage(
    intervals: Sequence[Interval], time_zone: str
) -> dict[tuple[int, date], IntervalUsage]:
    """Per (group, day in ``time_zone``): what the intervals used."""
    if not intervals:
        return {}
    columns = list(zip(*(
        (i.group, i.gpu_id, i.owner, i.start, i.end, i.cap_pct, float(i.idle_util_pct),
         float(i.idle_memory_mib)) for i in intervals
    ), strict=True))  # fmt: skip
    sql = _SQL.format(hour=GpuHour._meta.db_table, owner=OwnerHour._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(c) for c in columns] + [time_zone])
        return {
            (grp, day): IntervalUsage(float(h or 0), float(u or 0), float(m or 0), float(i or 0))
            for grp, day, h, u, m, i in cursor.fetchall()
        }
