"""History: 1-minute and 1-hour rollups per GPU and per process owner.

Each poll cycle appends one compact blob of its readings to a buffer for the
current minute (one Redis RPUSH, whatever the fleet size). Once a minute has
passed, ``flush`` claims its buffer atomically (a Redis RENAME, so two workers
never flush the same minute), aggregates it into ``GpuMinute``/``OwnerMinute``
rows and recomputes the hours it touched from those minutes. Retention prunes
both. Queries take a set of GPU ids and a time range, so per-allocation and
per-tenant history can be built on top by mapping them to GPUs and intervals.
"""

from __future__ import annotations

import threading
import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Avg, Count, Max, Sum

from agents.models import GPU, GpuHour, GpuMinute, OwnerHour, OwnerMinute
from portal import redis_client

# Per GPU, in this order; None where the card did not report the field.
SAMPLE_FIELDS = ("utilization_gpu_pct", "memory_used_mib", "power_w", "temperature_c")
_ROLLUP_FIELDS = ("util", "memory_used", "power", "temperature")
_ROLLUP_COLUMNS = {
    "util": ("util_avg", "util_max"),
    "memory_used": ("memory_used_avg_mib", "memory_used_max_mib"),
    "power": ("power_avg_w", "power_max_w"),
    "temperature": ("temperature_avg_c", "temperature_max_c"),
}
# A claimed minute whose flush died is retried after this long.
STALE_CLAIM_S = 300


def minute_of(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


def _moment(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, tz=UTC)


# --- the buffer -----------------------------------------------------------------


class _RedisBuffer:
    def __init__(self) -> None:
        self.prefix = redis_client.key("rollup")

    @property
    def client(self) -> redis.Redis:
        return redis_client.client()

    def append(self, minute: int, blob: bytes) -> None:
        key = f"{self.prefix}:buf:{minute}"
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, blob)
        pipe.expire(key, 3600 * 6)
        pipe.sadd(f"{self.prefix}:pending", minute)
        pipe.execute()

    def claim(self, before: int) -> list[tuple[int, str, list[bytes]]]:
        claimed = []
        for raw in self.client.smembers(f"{self.prefix}:pending"):
            minute = int(raw)
            if minute >= before:
                continue
            claim_key = f"{self.prefix}:claim:{minute}:{uuid.uuid4().hex}"
            try:
                self.client.rename(f"{self.prefix}:buf:{minute}", claim_key)
            except redis.ResponseError:  # another worker claimed it first
                self.client.srem(f"{self.prefix}:pending", minute)
                continue
            self.client.srem(f"{self.prefix}:pending", minute)
            claimed.append((minute, claim_key, self.client.lrange(claim_key, 0, -1)))
        # Claims left behind by a worker that died mid-flush are retried.
        for key in self.client.scan_iter(f"{self.prefix}:claim:*", count=1000):
            key = key.decode()
            minute = int(key.split(":")[-2])
            if minute < before - STALE_CLAIM_S // 60 and all(c[1] != key for c in claimed):
                claimed.append((minute, key, self.client.lrange(key, 0, -1)))
        return claimed

    def done(self, claim_key: str) -> None:
        self.client.delete(claim_key)


class _MemoryBuffer:
    """The embedded default's buffer: one process, so a dict and a lock suffice."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.minutes: dict[int, list[bytes]] = defaultdict(list)

    def append(self, minute: int, blob: bytes) -> None:
        with self.lock:
            self.minutes[minute].append(blob)

    def claim(self, before: int) -> list[tuple[int, str, list[bytes]]]:
        with self.lock:
            ready = sorted(m for m in self.minutes if m < before)
            return [(m, str(m), self.minutes.pop(m)) for m in ready]

    def done(self, claim_key: str) -> None:
        pass


_buffer: _RedisBuffer | _MemoryBuffer | None = None


def buffer() -> _RedisBuffer | _MemoryBuffer:
    global _buffer
    if _buffer is None:
        _buffer = _RedisBuffer() if settings.REDIS_URL else _MemoryBuffer()
    return _buffer


def buffer_samples(answered: dict[int, dict], gpu_ids: dict[str, int], now: datetime) -> None:
    """Append this cycle's readings (per GPU, and per process owner) to the minute's buffer."""
    gpus: dict[int, list] = {}
    owners: list[list] = []
    for snapshot in answered.values():
        for gpu in snapshot["gpus"]:
            pk = gpu_ids.get(gpu["uuid"])
            if pk is None:
                continue
            gpus[pk] = [gpu.get(f) for f in SAMPLE_FIELDS]
            per_owner: dict[str, list[float | None]] = {}
            for process in gpu.get("processes") or ():
                owner = str(process.get("user") or "")[:64]
                if not owner:
                    continue
                used = per_owner.setdefault(owner, [0.0, None])
                used[0] += process.get("memory_used_mib") or 0
                # Per-process SM utilization only where the agent reports it.
                if process.get("sm_util_pct") is not None:
                    used[1] = (used[1] or 0) + process["sm_util_pct"]
            owners.extend([pk, owner, mem, util] for owner, (mem, util) in per_owner.items())
    if gpus:
        blob = orjson.dumps({"g": gpus, "o": owners}, option=orjson.OPT_NON_STR_KEYS)
        buffer().append(minute_of(now), blob)


# --- flushing ---------------------------------------------------------------------
#
# Raw SQL on purpose: a minute of a 1,000-node fleet is 8,000 rows, and building model
# instances for them cost more than the rest of the cycle. The statements are portable
# between PostgreSQL and SQLite (ON CONFLICT ... DO UPDATE, CASE, excluded).

_GPU_VALUE_COLUMNS = [c for pair in _ROLLUP_COLUMNS.values() for c in pair]
_OWNER_VALUE_COLUMNS = ["memory_used_avg_mib", "memory_used_max_mib", "util_avg", "util_max"]


def _aggregate(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    return sum(present) / len(present), max(present)


def _minute_rows(minute: int, blobs: list[bytes]) -> tuple[list[tuple], list[tuple]]:
    """Aggregate a minute's blobs: (gpu_id, bucket, samples, avg, max, ...) rows."""
    per_gpu: dict[int, list[list]] = defaultdict(list)
    per_owner: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    for blob in blobs:
        data = orjson.loads(blob)
        for pk, sample in data["g"].items():
            per_gpu[int(pk)].append(sample)
        for pk, owner, mem, util in data["o"]:
            per_owner[(pk, owner)].append((mem, util))
    bucket = _moment(minute)
    gpu_rows = []
    for pk, samples in per_gpu.items():
        values: list[float | None] = []
        for column in zip(*samples, strict=True):
            values.extend(_aggregate(column))
        gpu_rows.append((pk, bucket, len(samples), *values))
    owner_rows = [
        (pk, owner, bucket, len(samples), *_aggregate([s[0] for s in samples]),
         *_aggregate([s[1] for s in samples]))
        for (pk, owner), samples in per_owner.items()
    ]  # fmt: skip
    return gpu_rows, owner_rows


def _merge_clause(table: str, keys: list[str], columns: list[str]) -> str:
    """Fold a minute into its hour: sample-weighted averages, maxima of maxima."""
    updates = [f"samples = {table}.samples + excluded.samples"]
    for column in columns:
        old, new = f"{table}.{column}", f"excluded.{column}"
        if "_avg" in column:
            updates.append(
                f"{column} = CASE WHEN {old} IS NULL THEN {new} WHEN {new} IS NULL THEN {old} "
                f"ELSE ({old} * {table}.samples + {new} * excluded.samples) "
                f"/ ({table}.samples + excluded.samples) END"
            )
        else:
            updates.append(
                f"{column} = CASE WHEN {old} IS NULL OR {new} > {old} THEN {new} ELSE {old} END"
            )
    return f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(updates)}"


# Rows per INSERT: under both PostgreSQL's 65,535 and SQLite's 32,766 parameters.
_MAX_PARAMETERS = 30_000


def _insert(cursor, table: str, columns: list[str], rows: list[tuple], suffix: str = "") -> None:
    """Write many rows at once: COPY on PostgreSQL, multi-row INSERTs elsewhere.

    With a ``suffix`` (an ON CONFLICT clause), PostgreSQL copies into a temporary
    table first and upserts from it in one statement. Placeholders are avoided there
    because turning 100,000 of them into a server query cost seconds of client CPU.
    """
    if not rows:
        return
    names = ", ".join(columns)
    if cursor.db.vendor == "postgresql":
        target = table
        if suffix:
            target = f"{table}_incoming"
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {target} AS "  # noqa: S608 (names are ours)
                f"SELECT {names} FROM {table} WITH NO DATA"
            )
            cursor.execute(f"TRUNCATE {target}")
        with cursor.cursor.copy(f"COPY {target} ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        if suffix:
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {names} FROM {target}{suffix}"  # noqa: S608
            )
        return
    per_statement = max(1, _MAX_PARAMETERS // len(columns))
    row_marks = f"({', '.join(['%s'] * len(columns))})"
    for start in range(0, len(rows), per_statement):
        batch = rows[start : start + per_statement]
        sql = (
            f"INSERT INTO {table} ({names}) "  # noqa: S608 (names are ours)
            f"VALUES {', '.join([row_marks] * len(batch))}{suffix}"
        )
        cursor.execute(sql, [value for row in batch for value in row])


def _hour_of(rows: list[tuple], bucket_at: int) -> list[tuple]:
    return [
        (*row[:bucket_at], row[bucket_at].replace(minute=0), *row[bucket_at + 1 :]) for row in rows
    ]


def flush(now: datetime) -> int:
    """Turn every finished minute in the buffer into rows; returns the GPU-minutes written."""
    written = 0
    source = buffer()
    gpu_keys, owner_keys = ["gpu_id", "bucket"], ["gpu_id", "owner", "bucket"]
    for minute, claim_key, blobs in source.claim(before=minute_of(now)):
        gpu_rows, owner_rows = _minute_rows(minute, blobs)
        # Cards deleted since they were sampled have no history to keep.
        alive = set(
            GPU.objects.filter(pk__any={r[0] for r in gpu_rows}).values_list("pk", flat=True)
        )
        gpu_rows = [r for r in gpu_rows if r[0] in alive]
        owner_rows = [r for r in owner_rows if r[0] in alive]
        with transaction.atomic(), connection.cursor() as cursor:
            # A minute already written (a claim retried after its commit) is not merged
            # into its hour a second time.
            if not GpuMinute.objects.filter(bucket=_moment(minute)).exists():
                columns = [*gpu_keys, "samples", *_GPU_VALUE_COLUMNS]
                _insert(cursor, GpuMinute._meta.db_table, columns, gpu_rows)
                hour = GpuHour._meta.db_table
                merge = _merge_clause(hour, gpu_keys, _GPU_VALUE_COLUMNS)
                _insert(cursor, hour, columns, _hour_of(gpu_rows, 1), merge)
                columns = [*owner_keys, "samples", *_OWNER_VALUE_COLUMNS]
                _insert(cursor, OwnerMinute._meta.db_table, columns, owner_rows)
                hour = OwnerHour._meta.db_table
                merge = _merge_clause(hour, owner_keys, _OWNER_VALUE_COLUMNS)
                _insert(cursor, hour, columns, _hour_of(owner_rows, 2), merge)
                written += len(gpu_rows)
        source.done(claim_key)
    return written


def prune(now: datetime) -> dict[str, int]:
    """Drop rollups past their retention (settings ROLLUP_MINUTE_DAYS and ROLLUP_HOUR_DAYS)."""
    minute_cut = now - timedelta(days=settings.ROLLUP_MINUTE_DAYS)
    hour_cut = now - timedelta(days=settings.ROLLUP_HOUR_DAYS)
    return {
        "minutes": GpuMinute.objects.filter(bucket__lt=minute_cut).delete()[0]
        + OwnerMinute.objects.filter(bucket__lt=minute_cut).delete()[0],
        "hours": GpuHour.objects.filter(bucket__lt=hour_cut).delete()[0]
        + OwnerHour.objects.filter(bucket__lt=hour_cut).delete()[0],
    }


# --- queries -----------------------------------------------------------------------

# Ranges up to this long are drawn from minutes; longer ones from hours.
MINUTE_RANGE_LIMIT = timedelta(hours=36)


def _in_range(
    tables: dict[str, type],
    gpu_ids: Iterable[int],
    start: datetime,
    end: datetime,
    resolution: str | None,
) -> tuple[str, Any]:
    """The resolution to read (chosen by the range when not given) and its rows in range."""
    if resolution is None:
        resolution = "1m" if end - start <= MINUTE_RANGE_LIMIT else "1h"
    rows = tables[resolution].objects.filter(
        gpu_id__any=list(gpu_ids), bucket__gte=start, bucket__lt=end
    )
    return resolution, rows


def series(
    gpu_ids: Iterable[int], start: datetime, end: datetime, resolution: str | None = None
) -> dict[str, Any]:
    """History of a set of GPUs: per bucket, utilization averaged over the cards,
    memory and power summed, maxima as maxima.
    """
    tables = {"1m": GpuMinute, "1h": GpuHour}
    resolution, in_range = _in_range(tables, gpu_ids, start, end, resolution)
    rows = (
        in_range.values("bucket")
        .annotate(
            gpus=Count("gpu_id"),
            util_avg=Avg("util_avg"),
            util_max=Max("util_max"),
            memory_used_avg_mib=Sum("memory_used_avg_mib"),
            memory_used_max_mib=Sum("memory_used_max_mib"),
            power_avg_w=Sum("power_avg_w"),
            power_max_w=Sum("power_max_w"),
            temperature_avg_c=Avg("temperature_avg_c"),
            temperature_max_c=Max("temperature_max_c"),
        )
        .order_by("bucket")
    )
    return {
        "resolution": resolution,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "points": [
            {**{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()
                if k != "bucket"}, "t": r["bucket"].isoformat()}
            for r in rows
        ],
    }  # fmt: skip


def owner_usage(
    gpu_ids: Iterable[int], start: datetime, end: datetime, resolution: str | None = None
) -> list[dict[str, Any]]:
    """Per process owner over a range: average and peak memory, average utilization."""
    tables = {"1m": OwnerMinute, "1h": OwnerHour}
    _, in_range = _in_range(tables, gpu_ids, start, end, resolution)
    rows = (
        in_range.values("owner")
        .annotate(
            memory_used_avg_mib=Avg("memory_used_avg_mib"),
            memory_used_max_mib=Max("memory_used_max_mib"),
            util_avg=Avg("util_avg"),
            samples=Sum("samples"),
        )
        .order_by("-memory_used_avg_mib")
    )
    return list(rows)
