"""History: 1-minute and 1-hour rollups per GPU and per process owner.

``flush`` claims each finished minute of the sample buffer (telemetry.sample_buffer) and
merges it into ``GpuMinute``/``OwnerMinute`` rows; every FOLD_EVERY minutes those minutes
are folded into their hours at once (sample-weighted averages, maxima of maxima). A
minute can be merged more than once: samples that arrive after their minute was flushed
are claimed later and merged into the rows already there (and into its hour, if folded
already). Each claim is recorded in the transaction that merges it
(``telemetry_rollupclaim``), so a claim retried after its commit (the worker died before
deleting it) is not merged twice. A reading of 1e15 or more in size is implausible (a
broken sensor or agent) and counts as not reported: summed or squared, such numbers
overflow float8 and would fail the whole minute. A claim whose merge fails all the same
is logged and left for a later flush; it cannot hold up the other claims or the fold
(see ``flush``). Retention prunes both. The SQL is built in telemetry.rollup_sql; the
queries over the rollups are in telemetry.history.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import orjson
import psycopg
from django.conf import settings
from django.db import IntegrityError, connection, transaction

from agents.models import lock_inventory
from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute
from telemetry.rollup_sql import (
    CLAIMS_TABLE,
    GPU_PARAMS,
    OWNER_PARAMS,
    statements,
)
from telemetry.sample_buffer import (
    GPU_ID,
    OWNER,
    OWNER_GPU_ID,
    OWNER_VALUE_COLUMNS,
    SAMPLE_FIELDS,
    Claim,
    blob_columns,
    buffer,
    minute_of,
    minute_start,
)

logger = logging.getLogger(__name__)

# Claims recorded as merged are forgotten after this long; a claim lives in Redis at
# most 6 hours (the buffer's expiry), so it cannot come back after that.
CLAIM_MEMORY = timedelta(days=1)


def _joined(blobs: list[dict[str, bytes]], name: str, ids: str, brackets: bytes = b"{}") -> str:
    """One column of every blob as one array: a PostgreSQL array's ``{...}`` or, for the
    owners' strings (``brackets=b"[]"``, read with ``json_array_elements_text``), JSON's.

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


def _merge_minute(cursor, minute: int, blobs: list[dict[str, bytes]], hours: bool) -> int:
    bucket = minute_start(minute)
    moments = {"bucket": bucket, "hour": bucket.replace(minute=0)}
    gpus = {"ids": _joined(blobs, GPU_ID, GPU_ID)}
    for param, column in zip(GPU_PARAMS, SAMPLE_FIELDS, strict=True):
        gpus[param] = _joined(blobs, column, GPU_ID)
    written = _write_minute(cursor, GpuMinute, {**gpus, **moments}, hours)
    owners = {"ids": _joined(blobs, OWNER_GPU_ID, OWNER_GPU_ID)}
    if len(owners["ids"]) > 2:
        owners["owners"] = _joined(blobs, OWNER, OWNER_GPU_ID, b"[]")
        for param, column in zip(OWNER_PARAMS, OWNER_VALUE_COLUMNS, strict=True):
            owners[param] = _joined(blobs, column, OWNER_GPU_ID)
        _write_minute(cursor, OwnerMinute, {**owners, **moments}, hours)
    return written


def _execute(sql: str, params: dict[str, Any]) -> int:
    """Run a merge; the rows it wrote (minute rows, or as many hour rows with them)."""
    # Parameters bound by the server: PostgreSQL reads the arrays as they are, rather than
    # lexing them as literals of a query text of megabytes.
    cursor = psycopg.Cursor(connection.connection)
    cursor.execute(sql, params)
    return cursor.rowcount


def _write_minute(cursor, model: type, params: dict[str, Any], hours: bool) -> int:
    merge = statements().merge[model]
    cursor.execute(
        f"SELECT EXISTS (SELECT 1 FROM {model._meta.db_table} WHERE bucket = %s)",  # noqa: S608
        [params["bucket"]],
    )
    if not cursor.fetchone()[0]:
        try:
            with transaction.atomic():  # a savepoint
                return _execute(merge[hours, False], params)
        except (psycopg.IntegrityError, IntegrityError):
            pass  # another worker's claim of this minute came first
    return _execute(merge[hours, True], params)


# --- folding minutes into hours ---------------------------------------------------------
#
# Merging every minute into its hour rewrote all 8,000 hour rows of the fleet every
# minute, the largest part of the flush. Instead the minutes are folded into their hours
# every FOLD_EVERY minutes, in one pass over those minutes' rows, so an hour row is
# rewritten six times an hour rather than sixty. The row ``_FOLD_KEY`` of the claims
# table holds the first minute not folded yet: a minute before it is merged into its
# hour at once (samples that came late), a later one waits for the next fold. Merges
# read it FOR SHARE and the fold takes it FOR UPDATE, so a fold never misses a merge in
# flight and a merge never misses a fold. The hours of the 1-hour views may thus lag the
# minutes by up to FOLD_EVERY minutes.

FOLD_EVERY = 10
_FOLD_KEY = "fold:hours"


def _folded_until(cursor, before: int) -> int:
    # The first flush starts the folds from its own minute: nothing was merged before it.
    cursor.execute(
        f"INSERT INTO {CLAIMS_TABLE} (claim, minute) VALUES (%s, %s) "  # noqa: S608
        "ON CONFLICT (claim) DO NOTHING",
        [_FOLD_KEY, before],
    )
    cursor.execute(
        f"SELECT minute FROM {CLAIMS_TABLE} WHERE claim = %s FOR SHARE",  # noqa: S608
        [_FOLD_KEY],
    )
    return cursor.fetchone()[0]


def _fold_hours(before: int) -> None:
    """Fold the minutes not folded yet into their hours, when a FOLD_EVERY boundary passed."""
    sql = statements()
    select = f"SELECT minute FROM {CLAIMS_TABLE} WHERE claim = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(select, [_FOLD_KEY])
        row = cursor.fetchone()
    if row is None or before // FOLD_EVERY <= row[0] // FOLD_EVERY:
        return
    with transaction.atomic(), connection.cursor() as cursor:
        lock_inventory()
        cursor.execute(select + " FOR UPDATE", [_FOLD_KEY])
        folded_until = cursor.fetchone()[0]
        if before <= folded_until:  # another worker folded meanwhile
            return
        span = {"start": minute_start(folded_until), "end": minute_start(before)}
        for statement in sql.fold:
            cursor.execute(statement, span)
        cursor.execute(
            f"UPDATE {CLAIMS_TABLE} SET minute = %s WHERE claim = %s",  # noqa: S608
            [before, _FOLD_KEY],
        )


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
    for claim in source.claim(before=before):
        minute, claim_key, blobs = claim
        try:
            written += _merge_claim(claim, before)
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
    _fold_hours(before)
    return written


def _merge_claim(claim: Claim, before: int) -> int:
    minute, claim_key, blobs = claim
    columns = [fields for blob in blobs if (fields := blob_columns(blob))]
    with transaction.atomic(), connection.cursor() as cursor:
        lock_inventory()  # a card deleted meanwhile would fail the rows written for it
        # Recorded first: a second worker retrying the same claim waits here for this
        # one's commit, then finds it merged.
        cursor.execute(
            f"INSERT INTO {CLAIMS_TABLE} (claim, minute) VALUES (%s, %s) "  # noqa: S608
            "ON CONFLICT (claim) DO NOTHING",
            [claim_key, before],
        )
        if cursor.rowcount != 1 or not columns:
            return 0
        hours = minute < _folded_until(cursor, before)
        return _merge_minute(cursor, minute, columns, hours)


def prune(now: datetime) -> dict[str, int]:
    """Drop rollups past their retention (settings ROLLUP_MINUTE_DAYS and ROLLUP_HOUR_DAYS)."""
    minute_cut = now - timedelta(days=settings.ROLLUP_MINUTE_DAYS)
    hour_cut = now - timedelta(days=settings.ROLLUP_HOUR_DAYS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {CLAIMS_TABLE} WHERE minute < %s AND claim <> %s",  # noqa: S608
            [minute_of(now - CLAIM_MEMORY), _FOLD_KEY],
        )
    return {
        "minutes": GpuMinute.objects.filter(bucket__lt=minute_cut).delete()[0]
        + OwnerMinute.objects.filter(bucket__lt=minute_cut).delete()[0],
        "hours": GpuHour.objects.filter(bucket__lt=hour_cut).delete()[0]
        + OwnerHour.objects.filter(bucket__lt=hour_cut).delete()[0],
    }
