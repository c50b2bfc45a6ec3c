"""History: 1-minute and 1-hour rollups per GPU and per process owner.

Each poll cycle appends one compact blob of its readings to a buffer for the
current minute (one Redis RPUSH, whatever the fleet size). Once a minute has
passed, ``flush`` claims its buffer atomically (a Redis script renaming it, so two
workers never flush the same minute) and merges it into ``GpuMinute``/``OwnerMinute``
rows; the hours get the same merge (sample-weighted averages, maxima of maxima),
on PostgreSQL every FOLD_EVERY minutes for all those minutes at once. A minute
can be merged more than once: samples that arrive after their minute was flushed
are claimed later and merged into the rows already there. Each claim is recorded
in the transaction that merges it (``agents_rollupclaim``), so a claim retried
after its commit (the worker died before deleting it) is not merged twice. A reading
of ``LIMIT`` or more in size is implausible (a broken sensor or agent) and counts as
not reported: summed or squared, such numbers overflow PostgreSQL's float8 and would
fail the whole minute. A claim whose merge fails all the same is logged and left for a
later flush; it cannot hold up the other claims or the hour fold (see ``flush``).
Retention prunes both. Queries take a set of GPU ids and a time range, so
per-allocation and per-tenant history can be built on top by mapping them to
GPUs and intervals.
"""

from __future__ import annotations

import logging
import math
import operator
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Avg, Count, Max, Sum

from agents.models import GPU, GpuHour, GpuMinute, OwnerHour, OwnerMinute
from portal import redis_client

logger = logging.getLogger(__name__)

# Per GPU, in this order; None where the card did not report the field.
SAMPLE_FIELDS = ("utilization_gpu_pct", "memory_used_mib", "power_w", "temperature_c")
_ROLLUP_COLUMNS = {
    "util": ("util_avg", "util_max"),
    "memory_used": ("memory_used_avg_mib", "memory_used_max_mib"),
    "power": ("power_avg_w", "power_max_w"),
    "temperature": ("temperature_avg_c", "temperature_max_c"),
}
# Readings this large or larger are not aggregated (treated as not reported).
LIMIT = 1e15
_LIMIT_SQL = "1e15"
# A claimed minute whose flush died is retried after this long.
STALE_CLAIM_S = 300
# The buffer of a minute expires this long after its last sample; its claims inherit it.
BUFFER_TTL_S = 3600 * 6
# A claim whose merge keeps failing is dropped (with an error) at a failure that finds
# less than this left before its data expires, rather than vanishing silently.
GIVE_UP_TTL_S = 600
# Claims recorded as merged are forgotten after this long; a claim lives in Redis at
# most 6 hours (the buffer's expiry), so it cannot come back after that.
CLAIM_MEMORY = timedelta(days=1)
_CLAIMS_TABLE = "agents_rollupclaim"


def minute_of(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


def _moment(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, tz=UTC)


# --- the buffer -----------------------------------------------------------------
#
# One blob per cycle: nine JSON arrays joined by tabs (JSON never holds a raw tab),
# column by column so the flush can hand each column to PostgreSQL as one array:
#   GPU ids, util, memory used, power, temperature  (one entry per GPU)
#   GPU ids, owners, memory used, util              (one entry per GPU and process owner)
# Values are numbers or null (not reported); an owner's util is the sum of its
# processes' SM utilization, null where no process reported one.

# A claim: (minute, claim id, blobs).
Claim = tuple[int, str, list[bytes]]


# Claims a minute's buffer in one step: a worker killed half-way through (between taking
# the minute off the pending set and renaming its buffer) would lose the minute.
# KEYS: buffer, claim key, pending set; ARGV: the minute. Returns 1 when it claimed.
_CLAIM_SCRIPT = """
local claimed = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('RENAME', KEYS[1], KEYS[2])
    claimed = 1
end
redis.call('SREM', KEYS[3], ARGV[1])
return claimed
"""


class _RedisBuffer:
    def __init__(self) -> None:
        self.prefix = redis_client.key("rollup")
        self._claim_script: redis.commands.core.Script | None = None

    @property
    def client(self) -> redis.Redis:
        return redis_client.client()

    def append(self, minute: int, blob: bytes) -> None:
        key = f"{self.prefix}:buf:{minute}"
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, blob)
        pipe.expire(key, BUFFER_TTL_S)
        pipe.sadd(f"{self.prefix}:pending", minute)
        pipe.execute()

    def _parts(self, claim_key: str) -> list[str]:
        return claim_key[len(self.prefix) + len(":claim:") :].split(":")

    def claim(self, before: int) -> list[Claim]:
        """Claim the buffered minutes before ``before`` and the stale claims of others.

        A claim key names the minute, the minute it was claimed in (staleness counts
        from the claim, not from the minute: late samples are claimed long after their
        minute) and a random part.
        """
        client, pending = self.client, f"{self.prefix}:pending"
        if self._claim_script is None:
            self._claim_script = client.register_script(_CLAIM_SCRIPT)
        claimed = []
        for raw in client.smembers(pending):
            minute = int(raw)
            if minute >= before:
                continue
            # Off the pending set with the rename: a late append after it re-adds the
            # minute, so its samples are claimed by a later flush.
            claim_key = f"{self.prefix}:claim:{minute}:{before}:{uuid.uuid4().hex}"
            keys = [f"{self.prefix}:buf:{minute}", claim_key, pending]
            if self._claim_script(keys=keys, args=[minute], client=client):
                claimed.append((minute, claim_key, client.lrange(claim_key, 0, -1)))
        # Claims left behind by a worker that died mid-flush, or whose merge failed, are
        # retried.
        mine = {c[1] for c in claimed}
        for key in client.scan_iter(f"{self.prefix}:claim:*", count=1000):
            key = key.decode()
            parts = self._parts(key)
            minute = int(parts[0])
            claimed_in = int(parts[1]) if len(parts) == 3 else minute  # keys before late merges
            if claimed_in < before - STALE_CLAIM_S // 60 and key not in mine:
                claimed.append((minute, key, client.lrange(key, 0, -1)))
        return claimed

    def legacy(self, claim_key: str) -> bool:
        """Whether the claim was made by the version before late merges (no claim records)."""
        return len(self._parts(claim_key)) == 2

    def done(self, claim_key: str) -> None:
        self.client.delete(claim_key)

    def failed(self, claim: Claim) -> bool:
        """A claim not merged: kept for a later flush; True when dropped instead.

        It stays in Redis, retried with the stale claims, until its data would expire
        with the buffer; the failure that finds it about to expire drops it.
        """
        claim_key = claim[1]
        ttl = self.client.ttl(claim_key)
        if ttl == -1:  # no expiry (the append died between RPUSH and EXPIRE): give it one
            self.client.expire(claim_key, BUFFER_TTL_S)
        elif 0 <= ttl < GIVE_UP_TTL_S:  # (-2: gone, another worker merged it meanwhile)
            self.done(claim_key)
            return True
        return False


class _MemoryBuffer:
    """The embedded default's buffer: one process, so a dict and a lock suffice."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.minutes: dict[int, list[bytes]] = defaultdict(list)
        self.before = 0  # the latest claim's, for the expiry of claims that failed

    def append(self, minute: int, blob: bytes) -> None:
        with self.lock:
            self.minutes[minute].append(blob)

    def claim(self, before: int) -> list[Claim]:
        with self.lock:
            self.before = max(self.before, before)
            ready = sorted(m for m in self.minutes if m < before)
            return [(m, f"mem:{m}:{uuid.uuid4().hex}", self.minutes.pop(m)) for m in ready]

    def legacy(self, claim_key: str) -> bool:
        return False

    def done(self, claim_key: str) -> None:
        pass

    def failed(self, claim: Claim) -> bool:
        """As Redis's: put back for the next flush until about as old as a buffer expires."""
        minute, _, blobs = claim
        if minute < self.before - (BUFFER_TTL_S - GIVE_UP_TTL_S) // 60:
            return True
        with self.lock:
            self.minutes[minute][:0] = blobs
        return False


_buffer: _RedisBuffer | _MemoryBuffer | None = None


def buffer() -> _RedisBuffer | _MemoryBuffer:
    global _buffer
    if _buffer is None:
        _buffer = _RedisBuffer() if settings.REDIS_URL else _MemoryBuffer()
    return _buffer


_sample = operator.itemgetter(*SAMPLE_FIELDS)
# What a JSON array of numbers and nulls holds between its brackets.
_NUMERIC_JSON = b"0123456789.-+eEnul,"


def buffer_samples(answered: dict[int, dict], gpu_ids: dict[str, int], now: datetime) -> None:
    """Append this cycle's readings (per GPU, and per process owner) to the minute's buffer."""
    try:
        blob = _encode(answered, gpu_ids)
    except (TypeError, ValueError, AttributeError, LookupError):
        # Something an agent sent is not what it should be (a string for a number, a
        # process that is not an object): cleaned, so one bad card cannot spoil the
        # minute of the whole fleet.
        blob = _encode(_cleaned(answered), gpu_ids)
    if blob is not None:
        buffer().append(minute_of(now), blob)


def _encode(answered: dict[int, dict], gpu_ids: dict[str, int]) -> bytes | None:
    """The cycle's blob; raises on a value that is not a number where one belongs."""
    samples: dict[int, tuple] = {}
    owned: list[tuple] = []  # (gpu id, owner, memory used, util)
    pk_of = gpu_ids.get
    for snapshot in answered.values():
        for gpu in snapshot["gpus"]:
            pk = pk_of(gpu["uuid"])
            if pk is None:
                continue
            try:
                samples[pk] = _sample(gpu)
            except KeyError:  # the agent leaves out what the card did not report
                samples[pk] = tuple([gpu.get(f) for f in SAMPLE_FIELDS])
            processes = gpu.get("processes")
            if not processes:
                continue
            if len(processes) == 1:  # the usual case: one job, one owner
                process = processes[0]
                if owner := process.get("user"):
                    memory = process.get("memory_used_mib") or 0
                    owned.append((pk, owner, memory, process.get("sm_util_pct")))
                continue
            per_owner: dict[str, list] = {}
            for process in processes:
                owner = process.get("user")
                if not owner:
                    continue
                memory = process.get("memory_used_mib") or 0
                # Per-process SM utilization only where the agent reports it.
                util = process.get("sm_util_pct")
                if (seen := per_owner.get(owner)) is None:
                    per_owner[owner] = [memory, util]
                else:
                    seen[0] += memory
                    if util is not None:
                        seen[1] = util if seen[1] is None else seen[1] + util
            owned.extend((pk, owner, memory, util) for owner, (memory, util) in per_owner.items())
    return _blob(samples, owned) if samples else None


def _blob(samples: dict[int, tuple], owned: list[tuple]) -> bytes:
    dumps = orjson.dumps
    columns = [dumps(list(samples)), *map(dumps, zip(*samples.values(), strict=True))]
    if owned:
        owner_columns = list(zip(*owned, strict=True))
        # Checked once per distinct owner rather than per process: few users run many jobs.
        if any(type(o) is not str or len(o) > 64 for o in set(owner_columns[1])):
            raise ValueError("an owner that is not a short text")
        columns += map(dumps, owner_columns)
    else:
        columns += [b"[]"] * 4
    for index in (1, 2, 3, 4, 7, 8):
        if columns[index][1:-1].translate(None, _NUMERIC_JSON):
            raise ValueError("a sample that is not a number")
    if b"\\u0000" in columns[6]:
        raise ValueError("an owner with a NUL character")  # PostgreSQL text cannot hold one
    return b"\t".join(columns)


def _fields(blob: bytes) -> list[bytes]:
    """A blob's nine columns."""
    if blob[:1] == b"{":
        # Buffered by the version before this one (one JSON object per cycle), still
        # there at an upgrade.
        try:
            data = orjson.loads(blob)
            samples = {int(pk): tuple(values) for pk, values in data["g"].items()}
            blob = _blob(samples, [tuple(row) for row in data["o"]])
        except (TypeError, ValueError, LookupError):
            return []
    return blob.split(b"\t")


def _number(value: Any) -> float | None:
    if type(value) not in (int, float):  # bool is not a reading
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _owner(value: Any) -> str | None:
    if not value:
        return None
    text = str(value)[:64].replace("\x00", "")
    return text.encode("utf-8", "replace").decode("utf-8") or None


def _cleaned(answered: dict[int, dict]) -> dict[int, dict]:
    """The readings the rollups use, with anything that is not a number as not reported."""
    cleaned = {}
    for node_id, snapshot in answered.items():
        gpus = []
        for gpu in snapshot["gpus"]:
            processes = gpu.get("processes")
            gpus.append({
                "uuid": gpu["uuid"],
                **{f: _number(gpu.get(f)) for f in SAMPLE_FIELDS},
                "processes": [
                    {"user": _owner(p.get("user")),
                     "memory_used_mib": _number(p.get("memory_used_mib")),
                     "sm_util_pct": _number(p.get("sm_util_pct"))}
                    for p in (processes if isinstance(processes, list) else ())
                    if isinstance(p, dict)
                ],
            })  # fmt: skip
        cleaned[node_id] = {"gpus": gpus}
    return cleaned


# --- flushing ---------------------------------------------------------------------
#
# Raw SQL on purpose: a minute of a 1,000-node fleet is 96,000 samples and 8,000 rows.
# On PostgreSQL the database does the work: each column of the minute's blobs goes in
# as one array parameter, and one statement per table aggregates the unnested samples
# and writes the minute rows (and, for a minute folded already, merges into its hours).
# Elsewhere (the embedded SQLite default) Python aggregates and multi-row upserts write
# minutes and hours at once. The upserts are portable between PostgreSQL and SQLite
# (ON CONFLICT ... DO UPDATE, CASE, excluded).

_GPU_VALUE_COLUMNS = [c for pair in _ROLLUP_COLUMNS.values() for c in pair]
_OWNER_VALUE_COLUMNS = ["memory_used_avg_mib", "memory_used_max_mib", "util_avg", "util_max"]
_GPU_KEYS, _OWNER_KEYS = ["gpu_id", "bucket"], ["gpu_id", "owner", "bucket"]


def _merge_clause(table: str, keys: list[str], columns: list[str]) -> str:
    """Fold new samples into a row: sample-weighted averages, maxima of maxima.

    An implausible value already in the row (written before such values were left out)
    counts as none, so weighing it cannot overflow.
    """
    updates = [f"samples = {table}.samples + excluded.samples"]
    for column in columns:
        old, new = f"{table}.{column}", f"excluded.{column}"
        absent = f"{old} IS NULL OR abs({old}) >= {_LIMIT_SQL}"
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
    """Fold a range of minutes into their hours (averages weighted by samples).

    Minute values too large to be readings (written before they were left out) are left
    out here too: weighed by their samples they would overflow and stop every fold.
    """
    minute, hour = model._meta.db_table, _hour_table(model)
    group = [k for k in keys if k != "bucket"]
    plausible = {c: f"FILTER (WHERE abs({c}) < {_LIMIT_SQL})" for c in columns}
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
# first, which took twice as long for 96,000 samples.
_PG_GPU_SAMPLES = (
    "(SELECT unnest(%(ids)s::bigint[]) AS gpu_id, unnest(%(util)s::float8[]) AS util, "
    "unnest(%(mem)s::float8[]) AS mem, unnest(%(power)s::float8[]) AS power, "
    "unnest(%(temp)s::float8[]) AS temp) AS s"
)
_PG_OWNER_SAMPLES = (
    "(SELECT unnest(%(ids)s::bigint[]) AS gpu_id, "
    "json_array_elements_text(%(owners)s::json) AS owner, "
    "unnest(%(mem)s::float8[]) AS mem, unnest(%(util)s::float8[]) AS util) AS s"
)
_SAMPLE_NAMES = ("util", "mem", "power", "temp")
_PG_GPU_AGGREGATE = (
    "SELECT gpu_id, count(*) AS samples, "  # noqa: S608
    + _aggregates(list(zip(_SAMPLE_NAMES, _ROLLUP_COLUMNS.values(), strict=True)))
    + f" FROM {_PG_GPU_SAMPLES} GROUP BY gpu_id"
)  # fmt: skip
_PG_OWNER_AGGREGATE = (
    "SELECT gpu_id, owner, count(*) AS samples, "  # noqa: S608
    + _aggregates([("mem", ("memory_used_avg_mib", "memory_used_max_mib")),
                   ("util", ("util_avg", "util_max"))])
    + f" FROM {_PG_OWNER_SAMPLES} GROUP BY gpu_id, owner"
)  # fmt: skip
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


def _joined(columns: list[list[bytes]], index: int, brackets: bytes) -> str:
    """One column of every blob as one array: PostgreSQL's ``{...}`` or JSON's ``[...]``."""
    parts = [c[index][1:-1] for c in columns if len(c[index]) > 2]
    return (brackets[:1] + b",".join(parts) + brackets[1:]).decode()


def _merge_postgresql(cursor, minute: int, columns: list[list[bytes]], hours: bool) -> int:
    bucket = _moment(minute)
    moments = {"bucket": bucket, "hour": bucket.replace(minute=0)}
    names = ("ids", "util", "mem", "power", "temp")
    gpus = {name: _joined(columns, i, b"{}") for i, name in enumerate(names)}
    written = _write_minute(cursor, GpuMinute, {**gpus, **moments}, hours)
    owners = {
        name: _joined(columns, i, b"{}")
        for i, name in zip((5, 7, 8), ("ids", "mem", "util"), strict=True)
    }
    if owners["ids"] != "{}":
        owners["owners"] = _joined(columns, 6, b"[]")
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
    # The first flush folds nothing: whatever came before it is in the hours already
    # (merged at once, as before there were folds), so it starts from its own minute.
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
        span = {"start": _moment(folded_until), "end": _moment(before)}
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


def _minute_rows(minute: int, columns: list[list[bytes]]) -> tuple[list[tuple], list[tuple]]:
    """Aggregate a minute's blobs in Python: (gpu_id, bucket, samples, avg, max, ...) rows."""
    per_gpu: dict[int, list[tuple]] = defaultdict(list)
    per_owner: dict[tuple[int, str], list[tuple]] = defaultdict(list)
    for blob in columns:
        ids, *values = map(orjson.loads, blob[:5])
        for pk, *sample in zip(ids, *values, strict=True):
            per_gpu[pk].append(sample)
        for pk, owner, *used in zip(*map(orjson.loads, blob[5:]), strict=True):
            per_owner[(pk, owner)].append(used)
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


def _merge_python(cursor, minute: int, columns: list[list[bytes]]) -> int:
    gpu_rows, owner_rows = _minute_rows(minute, columns)
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
            logger.exception("rollups: minute %s (%s) not merged", _moment(minute), claim_key)
            if source.failed(claim):
                logger.error(
                    "rollups: minute %s (%s, %d blobs) dropped: its merge kept failing "
                    "and its data is about to expire",
                    _moment(minute), claim_key, len(blobs),
                )  # fmt: skip
            continue
        source.done(claim_key)
    if postgresql:
        _fold_hours(before)
    return written


def _merge_claim(source, claim: Claim, before: int, postgresql: bool) -> int:
    minute, claim_key, blobs = claim
    # A claim left by the version before claims were recorded (its worker died before
    # deleting it): that version wrote a minute once and never merged into it, so rows
    # for the minute mean the claim was merged. Its rule, kept for its keys.
    if source.legacy(claim_key) and GpuMinute.objects.filter(bucket=_moment(minute)).exists():
        return 0
    columns = [fields for blob in blobs if (fields := _fields(blob))]
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
