"""History: 1-minute and 1-hour rollups per GPU and per process owner.

``flush`` claims each finished minute of the sample buffer (telemetry.sample_buffer) and
merges it into ``GpuMinute``/``OwnerMinute`` rows; the hours get the same merge
(sample-weighted averages, maxima of maxima), on PostgreSQL every FOLD_EVERY minutes
for all those minutes at once. A minute can be merged more than once: samples that
arrive after their minute was flushed are claimed later and merged into the rows
already there. Each claim is recorded in the transaction that merges it
(``telemetry_rollupclaim``), so a claim retried after its commit (the worker died before
deleting it) is not merged twice. A reading of ``LIMIT`` or more in size is
implausible (a broken sensor or agent) and counts as not reported: summed or squared,
such numbers overflow PostgreSQL's float8 and would fail the whole minute. A claim
whose merge fails all the same is logged and left for a later flush; it cannot hold
up the other claims or the hour fold (see ``flush``). Retention prunes both. The
queries over them are in telemetry.history.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import connection, transaction

from agents.gpu_agent import schema
from agents.models import GPU
from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute
from telemetry.sample_buffer import (
    GPU_ID,
    OWNER,
    OWNER_GPU_ID,
    Claim,
    blob_columns,
    buffer,
    minute_of,
    minute_start,
)

logger = logging.getLogger(__name__)

# (field, its avg and max columns) of what history keeps, from the reading schema.
_GPU_HISTORY = [(f.name, f.history.columns()) for f in schema.HISTORY_GPU_FIELDS]
_OWNER_HISTORY = [(f.name, f.history.columns()) for f in schema.HISTORY_PROCESS_FIELDS]
# Readings this large or larger are not aggregated (treated as not reported).
LIMIT = 1e15
_LIMIT_SQL = "1e15"
# Claims recorded as merged are forgotten after this long; a claim lives in Redis at
# most 6 hours (the buffer's expiry), so it cannot come back after that.
CLAIM_MEMORY = timedelta(days=1)
_CLAIMS_TABLE = "telemetry_rollupclaim"


# --- flushing ---------------------------------------------------------------------
#
# Raw SQL on purpose: a minute of a 1,000-node fleet is 96,000 samples and 8,000 rows.
# On PostgreSQL the database does the work: each column of the minute's blobs goes in
# as one array parameter, and one statement per table aggregates the unnested samples
# and writes the minute rows (and, for a minute folded already, merges into its hours).
# Elsewhere (the embedded SQLite default) Python aggregates and multi-row upserts write
# minutes and hours at once. The upserts are portable between PostgreSQL and SQLite
# (ON CONFLICT ... DO UPDATE, CASE, excluded).

_GPU_VALUE_COLUMNS = [c for _, pair in _GPU_HISTORY for c in pair]
_OWNER_VALUE_COLUMNS = [c for _, pair in _OWNER_HISTORY for c in pair]
_GPU_KEYS, _OWNER_KEYS = ["gpu_id", "bucket"], ["gpu_id", "owner", "bucket"]


def _merge_clause(table: str, keys: list[str], columns: list[str]) -> str:
    """Fold new samples into a row: sample-weighted averages, maxima of maxima."""
    updates = [f"samples = {table}.samples + excluded.samples"]
    for column in columns:
        old, new = f"{table}.{column}", f"excluded.{column}"
        absent = f"{old} IS NULL"
        if "_avg" in column:
            updates.append(
                f"{column} = CASE WHEN {absent} THEN {new} WHEN {new} IS NULL THEN {old} "
                f"ELSE ({old} * {table}.samples + {new} * excluded.samples) "
                f"/ ({table}.samples + excluded.samples) END"
            )
        else:
            updates.append(
                f"{column} = CASE WHEN {absent} OR {new} > {old} THEN {new} ELSE {old} END"
            )
    return f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {', '.join(updates)}"


def _hour_table(model: type) -> str:
    return {GpuMinute: GpuHour, OwnerMinute: OwnerHour}[model]._meta.db_table


def _pg_merge_sql(
    model: type, keys: list[str], columns: list[str], aggregate: str, *, hours: bool, upsert: bool
) -> str:
    """One statement: aggregate the samples, write them into the minutes (and the hours).

    With ``hours``, ``agg`` is merged into both: folding a minute's new samples into its
    hour is the same merge as folding them into the minute. Without ``upsert`` the minute
    rows are plain inserts (a minute not written yet), cheaper than ON CONFLICT.
    """
    minute, hour = model._meta.db_table, _hour_table(model)
    names = ", ".join([*keys, "samples", *columns])
    values = ", ".join([k for k in keys if k != "bucket"] + ["%(bucket)s", "samples", *columns])
    into_minutes = f"INSERT INTO {minute} ({names}) SELECT {values} FROM live"  # noqa: S608
    if upsert:
        into_minutes += _merge_clause(minute, keys, columns)
    sql = (
        f"WITH agg AS ({aggregate}), "  # noqa: S608 (names are ours, values parameters)
        # Cards deleted since they were sampled have no history to keep. In key order,
        # so two merges of the same rows lock them in the same order (no deadlock).
        f"live AS (SELECT * FROM agg WHERE gpu_id IN (SELECT id FROM {GPU._meta.db_table}) "
        f"ORDER BY {', '.join(k for k in keys if k != 'bucket')})"
    )
    if not hours:
        return f"{sql} {into_minutes}"
    hour_values = values.replace("%(bucket)s", "%(hour)s")
    return (
        f"{sql}, minute AS ({into_minutes}) "  # noqa: S608
        f"INSERT INTO {hour} ({names}) SELECT {hour_values} FROM live"
        f"{_merge_clause(hour, keys, columns)}"
    )


def _pg_fold_sql(model: type, keys: list[str], columns: list[str]) -> str:
    """Fold a range of minutes into their hours (averages weighted by the samples of the
    minutes that have a value)."""
    minute, hour = model._meta.db_table, _hour_table(model)
    group = [k for k in keys if k != "bucket"]
    plausible = {c: f"FILTER (WHERE {c} IS NOT NULL)" for c in columns}
    folded = [
        f"sum({c} * samples) {plausible[c]} / sum(samples) {plausible[c]}"
        if "_avg" in c
        else f"max({c}) {plausible[c]}"
        for c in columns
    ]
    return (
        f"INSERT INTO {hour} ({', '.join([*keys, 'samples', *columns])}) "  # noqa: S608
        f"SELECT {', '.join(group)}, date_trunc('hour', bucket, 'UTC') AS hour_bucket, "
        f"sum(samples), {', '.join(folded)} FROM {minute} "
        "WHERE bucket >= %(start)s AND bucket < %(end)s "
        f"GROUP BY {', '.join(group)}, hour_bucket ORDER BY {', '.join(group)}, hour_bucket"
        f"{_merge_clause(hour, keys, columns)}"
    )


def _aggregates(pairs: list[tuple[str, tuple[str, str]]]) -> str:
    # Implausible readings are not reported ones: avg() sums their squares, which
    # overflows float8 ("value out of range") from about 1e154 and fails the minute.
    return ", ".join(
        f"avg({v}) FILTER (WHERE abs({v}) < {_LIMIT_SQL}) AS {avg}, "
        f"max({v}) FILTER (WHERE abs({v}) < {_LIMIT_SQL}) AS {peak}"
        for v, (avg, peak) in pairs
    )


# The samples as rows. Set-returning functions in the select list run in lockstep and
# stream (ProjectSet); in FROM (``unnest(a, b, ...)``) each would be materialized
# first, which took twice as long for 96,000 samples. Sample columns are bound as
# ``v0``, ``v1``... in the order of the history fields.
_GPU_PARAMS = [f"v{i}" for i in range(len(_GPU_HISTORY))]
_OWNER_PARAMS = [f"v{i}" for i in range(len(_OWNER_HISTORY))]
_PG_GPU_SAMPLES = (
    "(SELECT unnest(%(ids)s::bigint[]) AS gpu_id, "
    + ", ".join(f"unnest(%({v})s::float8[]) AS {v}" for v in _GPU_PARAMS)
    + ") AS s"
)
_PG_OWNER_SAMPLES = (
    "(SELECT unnest(%(ids)s::bigint[]) AS gpu_id, "
    "json_array_elements_text(%(owners)s::json) AS owner, "
    + ", ".join(f"unnest(%({v})s::float8[]) AS {v}" for v in _OWNER_PARAMS)
    + ") AS s"
)
_PG_GPU_AGGREGATE = (
    "SELECT gpu_id, count(*) AS samples, "  # noqa: S608
    + _aggregates([(v, pair) for v, (_, pair) in zip(_GPU_PARAMS, _GPU_HISTORY, strict=True)])
    + f" FROM {_PG_GPU_SAMPLES} GROUP BY gpu_id"
)
_PG_OWNER_AGGREGATE = (
    "SELECT gpu_id, owner, count(*) AS samples, "  # noqa: S608
    + _aggregates([(v, pair) for v, (_, pair) in zip(_OWNER_PARAMS, _OWNER_HISTORY, strict=True)])
    + f" FROM {_PG_OWNER_SAMPLES} GROUP BY gpu_id, owner"
)
# By (whether the minute's hours are merged at once, whether its rows may exist).
_PG_SQL = {
    model: {
        (hours, upsert): _pg_merge_sql(model, keys, columns, aggregate, hours=hours, upsert=upsert)
        for hours in (False, True)
        for upsert in (False, True)
    }
    for model, keys, columns, aggregate in (
        (GpuMinute, _GPU_KEYS, _GPU_VALUE_COLUMNS, _PG_GPU_AGGREGATE),
        (OwnerMinute, _OWNER_KEYS, _OWNER_VALUE_COLUMNS, _PG_OWNER_AGGREGATE),
    )
}
_PG_FOLD_SQL = [
    _pg_fold_sql(GpuMinute, _GPU_KEYS, _GPU_VALUE_COLUMNS),
    _pg_fold_sql(OwnerMinute, _OWNER_KEYS, _OWNER_VALUE_COLUMNS),
]


def _joined(blobs: list[dict[str, bytes]], name: str, ids: str, brackets: bytes) -> str:
    """One column of every blob as one array: PostgreSQL's ``{...}`` or JSON's ``[...]``.

    A blob without the column (buffered before its field joined history) adds nulls, one
    per entry of its ``ids`` column, so the columns stay in lockstep.
    """
    parts = []
    for blob in blobs:
        column = blob.get(name)
        if column is None:
            count = len(orjson.loads(blob.get(ids, b"[]")))
            column = b"[" + b",".join([b"null"] * count) + b"]"
        if len(column) > 2:
            parts.append(column[1:-1])
    return (brackets[:1] + b",".join(parts) + brackets[1:]).decode()


def _merge_postgresql(cursor, minute: int, blobs: list[dict[str, bytes]], hours: bool) -> int:
    bucket = minute_start(minute)
    moments = {"bucket": bucket, "hour": bucket.replace(minute=0)}
    gpus = {"ids": _joined(blobs, GPU_ID, GPU_ID, b"{}")}
    for param, (name, _) in zip(_GPU_PARAMS, _GPU_HISTORY, strict=True):
        gpus[param] = _joined(blobs, name, GPU_ID, b"{}")
    written = _write_minute(cursor, GpuMinute, {**gpus, **moments}, hours)
    owners = {"ids": _joined(blobs, OWNER_GPU_ID, OWNER_GPU_ID, b"{}")}
    if owners["ids"] != "{}":
        owners["owners"] = _joined(blobs, OWNER, OWNER_GPU_ID, b"[]")
        for param, (name, _) in zip(_OWNER_PARAMS, _OWNER_HISTORY, strict=True):
            owners[param] = _joined(blobs, f"owner.{name}", OWNER_GPU_ID, b"{}")
        _write_minute(cursor, OwnerMinute, {**owners, **moments}, hours)
    return written


def _write_minute(cursor, model: type, params: dict[str, Any], hours: bool) -> int:
    statements = _PG_SQL[model]
    cursor.execute(
        f"SELECT EXISTS (SELECT 1 FROM {model._meta.db_table} WHERE bucket = %s)",  # noqa: S608
        [params["bucket"]],
    )
    # Parameters bound by the server: PostgreSQL reads the arrays as they are, rather
    # than lexing them as literals of a query text of megabytes.
    bound = psycopg.Cursor(connection.connection)
    if not cursor.fetchone()[0]:
        try:
            with transaction.atomic():  # a savepoint
                bound.execute(statements[hours, False], params)
                return bound.rowcount
        except psycopg.IntegrityError:  # another worker's claim of this minute came first
            pass
    bound.execute(statements[hours, True], params)
    return bound.rowcount


# --- folding minutes into hours (PostgreSQL) ----------------------------------------
#
# Merging every minute into its hour rewrote all 8,000 hour rows of the fleet every
# minute, the largest part of the flush. Instead the minutes are folded into their hours
# every FOLD_EVERY minutes, in one pass over those minutes' rows, so an hour row is
# rewritten six times an hour rather than sixty. The row ``_FOLD_KEY`` of the claims
# table holds the first minute not folded yet: a minute before it is merged into its
# hour at once (samples that came late), a later one waits for the next fold. Merges
# read it FOR SHARE and the fold takes it FOR UPDATE, so a fold never misses a merge
# in flight and a merge never misses a fold. The hours of the 1-hour views may thus
# lag the minutes by up to FOLD_EVERY minutes.

FOLD_EVERY = 10
_FOLD_KEY = "fold:hours"


def _folded_until(cursor, before: int) -> int:
    # The first flush starts the folds from its own minute: nothing was merged before it.
    cursor.execute(
        f"INSERT INTO {_CLAIMS_TABLE} (claim, minute) VALUES (%s, %s) "  # noqa: S608
        "ON CONFLICT (claim) DO NOTHING",
        [_FOLD_KEY, before],
    )
    cursor.execute(
        f"SELECT minute FROM {_CLAIMS_TABLE} WHERE claim = %s FOR SHARE",  # noqa: S608
        [_FOLD_KEY],
    )
    return cursor.fetchone()[0]


def _fold_hours(before: int) -> None:
    """Fold the minutes not folded yet into their hours, when a FOLD_EVERY boundary passed."""
    select = f"SELECT minute FROM {_CLAIMS_TABLE} WHERE claim = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(select, [_FOLD_KEY])
        row = cursor.fetchone()
    if row is None or before // FOLD_EVERY <= row[0] // FOLD_EVERY:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(select + " FOR UPDATE", [_FOLD_KEY])
        folded_until = cursor.fetchone()[0]
        if before <= folded_until:  # another worker folded meanwhile
            return
        span = {"start": minute_start(folded_until), "end": minute_start(before)}
        for sql in _PG_FOLD_SQL:
            cursor.execute(sql, span)
        cursor.execute(
            f"UPDATE {_CLAIMS_TABLE} SET minute = %s WHERE claim = %s",  # noqa: S608
            [before, _FOLD_KEY],
        )


def _aggregate(values: Iterable[float | None]) -> tuple[float | None, float | None]:
    # As PostgreSQL's aggregates: implausible readings count as not reported.
    present = [v for v in values if v is not None and -LIMIT < v < LIMIT]
    if not present:
        return None, None
    return sum(present) / len(present), max(present)


def _column(blob: dict[str, bytes], name: str, count: int) -> list:
    return orjson.loads(blob[name]) if name in blob else [None] * count


def _minute_rows(minute: int, blobs: list[dict[str, bytes]]) -> tuple[list[tuple], list[tuple]]:
    """Aggregate a minute's blobs in Python: (gpu_id, bucket, samples, avg, max, ...) rows."""
    per_gpu: dict[int, list[tuple]] = defaultdict(list)
    per_owner: dict[tuple[int, str], list[tuple]] = defaultdict(list)
    for blob in blobs:
        ids = orjson.loads(blob[GPU_ID])
        values = [_column(blob, name, len(ids)) for name, _ in _GPU_HISTORY]
        for pk, *sample in zip(ids, *values, strict=True):
            per_gpu[pk].append(sample)
        owner_ids = _column(blob, OWNER_GPU_ID, 0)
        owners = _column(blob, OWNER, len(owner_ids))
        used = [_column(blob, f"owner.{name}", len(owner_ids)) for name, _ in _OWNER_HISTORY]
        for pk, owner, *sample in zip(owner_ids, owners, *used, strict=True):
            per_owner[(pk, owner)].append(sample)
    bucket = minute_start(minute)
    rows: list[list[tuple]] = [[], []]
    for out, groups in ((rows[0], per_gpu), (rows[1], per_owner)):
        for key, samples in groups.items():
            aggregates: list[float | None] = []
            for column in zip(*samples, strict=True):
                aggregates.extend(_aggregate(column))
            keys = key if isinstance(key, tuple) else (key,)
            out.append((*keys, bucket, len(samples), *aggregates))
    return rows[0], rows[1]


# Rows per INSERT: under both PostgreSQL's 65,535 and SQLite's 32,766 parameters.
_MAX_PARAMETERS = 30_000


def _upsert(cursor, table: str, columns: list[str], rows: list[tuple], suffix: str) -> None:
    names = ", ".join(columns)
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


def _merge_python(cursor, minute: int, blobs: list[dict[str, bytes]]) -> int:
    gpu_rows, owner_rows = _minute_rows(minute, blobs)
    alive = set(GPU.objects.filter(pk__any={r[0] for r in gpu_rows}).values_list("pk", flat=True))
    gpu_rows = [r for r in gpu_rows if r[0] in alive]
    owner_rows = [r for r in owner_rows if r[0] in alive]
    for model, keys, values, rows in (
        (GpuMinute, _GPU_KEYS, _GPU_VALUE_COLUMNS, gpu_rows),
        (OwnerMinute, _OWNER_KEYS, _OWNER_VALUE_COLUMNS, owner_rows),
    ):
        hour = _hour_table(model)
        names = [*keys, "samples", *values]
        table = model._meta.db_table
        _upsert(cursor, table, names, rows, _merge_clause(table, keys, values))
        _upsert(
            cursor, hour, names, _hour_of(rows, len(keys) - 1), _merge_clause(hour, keys, values)
        )
    return len(gpu_rows)


def flush(now: datetime) -> int:
    """Merge every finished minute in the buffer into rollups; returns the GPU-minutes written.

    A claim whose merge fails is logged and skipped: the other claims are merged and the
    hours folded all the same. It stays in the buffer and is retried with the stale
    claims at later flushes, until its data would expire (``BUFFER_TTL_S`` after the
    minute's last sample); then it is dropped, with an error.
    """
    written = 0
    source = buffer()
    before = minute_of(now)
    postgresql = connection.vendor == "postgresql"
    for claim in source.claim(before=before):
        minute, claim_key, blobs = claim
        try:
            written += _merge_claim(source, claim, before, postgresql)
        except Exception:  # one minute must not stop the others
            logger.exception("rollups: minute %s (%s) not merged", minute_start(minute), claim_key)
            if source.failed(claim):
                logger.error(
                    "rollups: minute %s (%s, %d blobs) dropped: its merge kept failing "
                    "and its data is about to expire",
                    minute_start(minute), claim_key, len(blobs),
                )  # fmt: skip
            continue
        source.done(claim_key)
    if postgresql:
        _fold_hours(before)
    return written


def _merge_claim(source, claim: Claim, before: int, postgresql: bool) -> int:
    minute, claim_key, blobs = claim
    columns = [fields for blob in blobs if (fields := blob_columns(blob))]
    with transaction.atomic(), connection.cursor() as cursor:
        # Recorded first: a second worker retrying the same claim waits here for this
        # one's commit, then finds it merged.
        cursor.execute(
            f"INSERT INTO {_CLAIMS_TABLE} (claim, minute) VALUES (%s, %s) "  # noqa: S608
            "ON CONFLICT (claim) DO NOTHING",
            [claim_key, before],
        )
        if cursor.rowcount != 1 or not columns:
            return 0
        if postgresql:
            hours = minute < _folded_until(cursor, before)
            return _merge_postgresql(cursor, minute, columns, hours)
        return _merge_python(cursor, minute, columns)  # the embedded default: hours at once


def prune(now: datetime) -> dict[str, int]:
    """Drop rollups past their retention (settings ROLLUP_MINUTE_DAYS and ROLLUP_HOUR_DAYS)."""
    minute_cut = now - timedelta(days=settings.ROLLUP_MINUTE_DAYS)
    hour_cut = now - timedelta(days=settings.ROLLUP_HOUR_DAYS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {_CLAIMS_TABLE} WHERE minute < %s AND claim <> %s",  # noqa: S608
            [minute_of(now - CLAIM_MEMORY), _FOLD_KEY],
        )
    return {
        "minutes": GpuMinute.objects.filter(bucket__lt=minute_cut).delete()[0]
        + OwnerMinute.objects.filter(bucket__lt=minute_cut).delete()[0],
        "hours": GpuHour.objects.filter(bucket__lt=hour_cut).delete()[0]
        + OwnerHour.objects.filter(bucket__lt=hour_cut).delete()[0],
    }
