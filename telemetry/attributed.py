"""An allocation's use of its card, summed in SQL: the idle scan's per-allocation work
as one statement over the rollups instead of Python over millions of rows.

Attribution (as ``reports.idle`` states it): a whole card takes the card's utilization
and memory; a slice takes its owner's memory on the card, and the card's utilization only
in buckets where the owner has a row. Only the card's buckets count as read (an owner row
without its card's is not a reading).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Max
from django.db.models.functions import Extract

from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute


@dataclass(frozen=True, slots=True)
class Attribution:
    """One allocation to sum: its card, its owner (None: the whole card is its own), the
    first bucket that counts, the thresholds of a busy bucket and where its window starts."""

    allocation_id: int
    gpu_id: int
    owner: str | None
    since: datetime
    util_pct: float = 0.0
    memory_mib: float = 0.0
    window_start: datetime | None = None


@dataclass(frozen=True, slots=True)
class AttributedUse:
    last_busy: datetime | None  # the last bucket at or over either threshold
    first_read: datetime | None
    read_in_window: int  # buckets read at or after window_start
    sparkline: tuple[float | None, ...] = ()  # average utilization per step
    p95_util_pct: float | None = None
    p95_memory_mib: float | None = None


_SQL = """
WITH a AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(gpus)s::bigint[], %(owners)s::text[],
                         %(since)s::timestamptz[], %(util)s::float8[], %(mem)s::float8[],
                         %(win)s::timestamptz[])
        AS a(id, gpu_id, owner, since, util_min, mem_min, win_start)
),
m AS (
    SELECT a.id, c.bucket, a.util_min, a.mem_min, a.win_start,
           CASE WHEN a.owner IS NULL OR o.bucket IS NOT NULL THEN c.util_avg
                ELSE 0.0 END AS util,
           CASE WHEN a.owner IS NULL THEN c.memory_used_avg_mib
                ELSE COALESCE(o.memory_used_avg_mib, 0.0) END AS mem
      FROM a
      JOIN {card} c ON c.gpu_id = a.gpu_id AND c.bucket >= GREATEST(a.since, %(start)s)
                   AND c.bucket < %(end)s
      LEFT JOIN {owner} o ON a.owner IS NOT NULL AND o.gpu_id = a.gpu_id
                         AND o.owner = a.owner AND o.bucket = c.bucket
),
s AS (
    SELECT id, LEAST(floor(EXTRACT(EPOCH FROM bucket - %(start)s) / %(step)s)::int,
                     %(last)s) AS i, avg(COALESCE(util, 0.0)) AS u
      FROM m WHERE %(points)s > 0 GROUP BY 1, 2
),
spark AS (SELECT id, array_agg(ARRAY[i, u]) AS steps FROM s GROUP BY id),
summed AS (
    SELECT m.id,
           max(m.bucket) FILTER (WHERE COALESCE(m.util, 0.0) >= m.util_min
                                    OR COALESCE(m.mem, 0.0) >= m.mem_min) AS last_busy,
           min(m.bucket) AS first_read,
           count(*) FILTER (WHERE m.bucket >= m.win_start) AS in_window,
           {p95}
      FROM m GROUP BY m.id
)
-- The steps joined once per allocation (a correlated lookup was quadratic).
SELECT summed.*, spark.steps FROM summed LEFT JOIN spark ON spark.id = summed.id
"""
_P95 = ("percentile_disc(0.95) WITHIN GROUP (ORDER BY m.util) AS p95_util, "
        "percentile_disc(0.95) WITHIN GROUP (ORDER BY m.mem) AS p95_mem")  # fmt: skip
# The statement hashes and groups ~2 M rows at fleet scale: with the default 4 MB it
# spilled to disk in batches (54 s against 39 s under the same load).
WORK_MEM = "256MB"
_TABLES = {"1m": (GpuMinute, OwnerMinute), "1h": (GpuHour, OwnerHour)}


def attributed_use(
    allocations: Sequence[Attribution], start: datetime, end: datetime, resolution: str = "1m",
    *, spark_points: int = 0, p95: bool = False,
) -> dict[int, AttributedUse]:  # fmt: skip
    """Per allocation, its attributed buckets in ``[start, end)`` (and from its ``since``)
    summed: one statement for all. Allocations without any bucket read are left out."""
    if not allocations:
        return {}
    card, owner = _TABLES[resolution]
    sql = _SQL.format(card=card._meta.db_table, owner=owner._meta.db_table,
                      p95=_P95 if p95 else "NULL AS p95_util, NULL AS p95_mem")  # fmt: skip
    points = max(spark_points, 0)
    params = {
        **_columns(allocations),
        "win": [a.window_start or start for a in allocations],
        "start": start, "end": end, "points": points, "last": max(points - 1, 0),
        "step": max((end - start).total_seconds() / points, 1e-9) if points else 1.0,
    }  # fmt: skip
    out = {}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = %s", [WORK_MEM])
        cursor.execute(sql, params)
        for alloc_id, last_busy, first, in_window, p95_util, p95_mem, steps in cursor:
            spark: list[float | None] = [None] * points
            for i, u in steps or ():
                spark[int(i)] = round(float(u), 1)
            out[alloc_id] = AttributedUse(
                last_busy=last_busy, first_read=first, read_in_window=in_window,
                sparkline=tuple(spark), p95_util_pct=p95_util, p95_memory_mib=p95_mem,
            )  # fmt: skip
    return out


def owners_seen(gpu_ids: Sequence[int], start: datetime, end: datetime) -> set[tuple[int, str]]:
    """(card, owner) pairs whose processes held memory on the card in ``[start, end)``."""
    rows = (
        OwnerMinute.objects.filter(
            gpu_id__in=list(gpu_ids), bucket__gte=start, bucket__lt=end,
            memory_used_avg_mib__gt=0,
        )
        .values_list("gpu_id", "owner")
        .distinct()
    )  # fmt: skip
    return set(rows)


# Per allocation, its attributed minutes packed as 11-byte records (big-endian): the
# minute's offset from ``start`` (int2), its utilization (float8) and whether it was busy
# (one byte). One aggregate, so the three stay in step; the reader scatters them.
_MINUTES_SQL = """
WITH a AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(gpus)s::bigint[], %(owners)s::text[],
                         %(since)s::timestamptz[], %(util)s::float8[], %(mem)s::float8[])
        AS a(id, gpu_id, owner, since, util_min, mem_min)
),
m AS (
    SELECT a.id, c.bucket,
           CASE WHEN a.owner IS NULL OR o.bucket IS NOT NULL THEN COALESCE(c.util_avg, 0.0)
                ELSE 0.0 END AS util,
           CASE WHEN a.owner IS NULL THEN COALESCE(c.memory_used_avg_mib, 0.0)
                ELSE COALESCE(o.memory_used_avg_mib, 0.0) END AS mem,
           a.util_min, a.mem_min
      FROM a
      JOIN telemetry_gpuminute c ON c.gpu_id = a.gpu_id
                                AND c.bucket >= GREATEST(a.since, %(start)s)
                                AND c.bucket >= %(lo)s AND c.bucket < %(end)s
      LEFT JOIN telemetry_ownerminute o ON a.owner IS NOT NULL AND o.gpu_id = a.gpu_id
                                       AND o.owner = a.owner AND o.bucket = c.bucket
                                       AND o.bucket >= %(lo)s AND o.bucket < %(end)s
)
SELECT id, string_agg(
    int2send((EXTRACT(EPOCH FROM bucket - %(start)s)::int / 60)::int2) || float8send(util)
    || CASE WHEN util >= util_min OR mem >= mem_min THEN '\\x01'::bytea ELSE '\\x00'::bytea END,
    ''::bytea)
  FROM m GROUP BY id
"""
MINUTE_RECORD = ">hdB"  # struct format of one packed minute


def attributed_minutes(
    allocations: Sequence[Attribution], start: datetime, end: datetime
) -> dict[int, bytes]:
    """Per allocation, its attributed minutes in ``[max(since, start), end)`` (at most
    36 hours), packed as ``MINUTE_RECORD``s in no particular order: the minute's offset
    from ``start``, the utilization it is given, and 1 when it is at or over either of its
    thresholds. Allocations without a minute read are left out."""
    if not allocations:
        return {}
    params = {
        **_columns(allocations),
        "start": start, "end": end,
        # The earliest bucket any of them reads, as a range the indexes can use: a pass
        # that reads only its newest minutes then reads only those.
        "lo": max(start, min(a.since for a in allocations)),
    }  # fmt: skip
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL work_mem = %s", [WORK_MEM])
        cursor.execute(_MINUTES_SQL, params)
        return {alloc_id: bytes(packed) for alloc_id, packed in cursor}


def owners_last_seen(
    gpu_ids: Sequence[int], start: datetime, end: datetime
) -> dict[tuple[int, str], int]:
    """(card, owner) pairs whose processes held memory on the card in ``[start, end)``,
    each with the last minute they did (a minute number: seconds since the epoch // 60,
    cheaper to read than 15,000 timestamps)."""
    if start >= end:
        return {}
    # The cards are filtered here, not in SQL: a list of the fleet's ids made the
    # planner scan the whole table instead of the range of buckets.
    wanted = set(gpu_ids)
    rows = (
        OwnerMinute.objects.filter(bucket__gte=start, bucket__lt=end, memory_used_avg_mib__gt=0)
        .values_list("gpu_id", "owner")
        .annotate(last=Max(Extract("bucket", "epoch")))
        .order_by()
    )
    return {(g, owner): int(last) // 60 for g, owner, last in rows if g in wanted}


def _columns(allocations) -> dict[str, list]:
    """The allocations as the statements' array parameters, one list per column."""
    return {
        "ids": [a.allocation_id for a in allocations],
        "gpus": [a.gpu_id for a in allocations],
        "owners": [a.owner for a in allocations],
        "since": [a.since for a in allocations],
        # float8[]: psycopg refuses a list mixing int and float (one pool's reclaim
        # thresholds in whole numbers, another's with decimals).
        "util": [float(a.util_pct) for a in allocations],
        "mem": [float(a.memory_mib) for a in allocations],
    }
