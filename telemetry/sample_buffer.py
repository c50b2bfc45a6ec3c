"""The sample buffer: each poll cycle's readings, kept per minute until rollups merge them.

Each poll cycle appends one compact blob of its readings to a buffer for the
current minute (one Redis RPUSH, whatever the fleet size; on the embedded default, to
the in-process Redis of portal.redis_client). Once a minute has passed,
``telemetry.rollups.flush`` claims its buffer atomically (a Redis script renaming it,
so two workers never flush the same minute) and merges it into the rollup tables. A
value that is not a number where one belongs counts as not reported, so one bad card
cannot spoil the minute of the fleet.
"""

from __future__ import annotations

import logging
import math
import operator
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from agents.gpu_agent import schema
from portal import redis_client

logger = logging.getLogger(__name__)

# What history keeps (the reading schema's history fields): per card, and per process
# owner summed over the owner's processes on the card.
SAMPLE_FIELDS = tuple(f.name for f in schema.HISTORY_GPU_FIELDS)
OWNER_FIELDS = tuple(f.name for f in schema.HISTORY_PROCESS_FIELDS)
# The blob's named columns.
GPU_ID, OWNER_GPU_ID, OWNER = "gpu_id", "owner.gpu_id", "owner.user"
# The owners' columns of OWNER_FIELDS; a card's columns are named as their fields.
OWNER_VALUE_COLUMNS = tuple(f"owner.{name}" for name in OWNER_FIELDS)

# A claimed minute whose flush died is retried after this long.
STALE_CLAIM_S = 300
# The buffer of a minute expires this long after its last sample; its claims inherit it.
BUFFER_TTL_S = 3600 * 6
# A claim whose merge keeps failing is dropped (with an error) at a failure that finds
# less than this left before its data expires, rather than vanishing silently.
GIVE_UP_TTL_S = 600


def minute_of(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


def minute_start(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, tz=UTC)


# --- the buffer -----------------------------------------------------------------
#
# One blob per cycle: named columns, each ``name=<JSON array>``, joined by tabs (JSON
# never holds a raw tab), column by column so the flush can hand each column to
# PostgreSQL as one array:
#   gpu_id, then each of SAMPLE_FIELDS                  (one entry per card)
#   owner.gpu_id, owner.user, then each of OWNER_FIELDS  (one entry per card and owner)
# Values are numbers or null (not reported). A column a blob lacks (written before its
# field joined history) reads as not reported.

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
        # Oldest first: minutes merged into their hours at once (late ones, a first flush's
        # backlog) make hours that depend on the order of merges (a side lacking a field
        # keeps the other's average), and a set's order is Redis's encoding's or a hash's.
        for minute in sorted(map(int, client.smembers(pending))):
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
            claimed_in = int(parts[1])
            if claimed_in < before - STALE_CLAIM_S // 60 and key not in mine:
                claimed.append((minute, key, client.lrange(key, 0, -1)))
        return claimed

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


_buffer: _RedisBuffer | None = None


def buffer() -> _RedisBuffer:
    global _buffer
    if _buffer is None:
        _buffer = _RedisBuffer()
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


def _process_values(process: dict) -> list:
    return list(map(process.get, OWNER_FIELDS))


def _encode(answered: dict[int, dict], gpu_ids: dict[str, int]) -> bytes | None:
    """The cycle's blob; raises on a value that is not a number where one belongs."""
    samples: dict[int, tuple] = {}
    owned: list[tuple] = []  # (gpu id, owner, *OWNER_FIELDS summed over its processes)
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
                    owned.append((pk, owner, *map(process.get, OWNER_FIELDS)))
                continue
            per_owner: dict[str, list] = {}
            for process in processes:
                owner = process.get("user")
                if not owner:
                    continue
                values = _process_values(process)
                if (seen := per_owner.get(owner)) is None:
                    per_owner[owner] = values
                    continue
                for i, value in enumerate(values):
                    if value is not None:
                        seen[i] = value if seen[i] is None else seen[i] + value
            owned.extend((pk, owner, *values) for owner, values in per_owner.items())
    return _blob(samples, owned) if samples else None


def _blob(samples: dict[int, tuple], owned: list[tuple]) -> bytes:
    dumps = orjson.dumps
    numeric = [dumps(list(samples)), *map(dumps, zip(*samples.values(), strict=True))]
    names = [GPU_ID, *SAMPLE_FIELDS]
    if owned:
        owner_columns = list(zip(*owned, strict=True))
        # Checked once per distinct owner rather than per process: few users run many jobs.
        if any(type(o) is not str or len(o) > 64 for o in set(owner_columns[1])):
            raise ValueError("an owner that is not a short text")
        owners = dumps(owner_columns[1])
        if b"\\u0000" in owners:
            raise ValueError("an owner with a NUL character")  # PostgreSQL text cannot hold one
        numeric += [dumps(owner_columns[0]), *map(dumps, owner_columns[2:])]
        names += [OWNER_GPU_ID, *OWNER_VALUE_COLUMNS]
    for column in numeric:
        if column[1:-1].translate(None, _NUMERIC_JSON):
            raise ValueError("a sample that is not a number")
    parts = [b"%s=%s" % (n.encode(), c) for n, c in zip(names, numeric, strict=True)]
    if owned:
        parts.append(b"%s=%s" % (OWNER.encode(), owners))
    return b"\t".join(parts)


def blob_columns(blob: bytes) -> dict[str, bytes]:
    """A blob's columns by name (JSON arrays); {} for a blob that is not one."""
    columns = {}
    for part in blob.split(b"\t"):
        name, sep, column = part.partition(b"=")
        if not sep:
            return {}
        columns[name.decode()] = column
    return columns


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
                     **{f: _number(p.get(f)) for f in OWNER_FIELDS}}
                    for p in (processes if isinstance(processes, list) else ())
                    if isinstance(p, dict)
                ],
            })  # fmt: skip
        cleaned[node_id] = {"gpus": gpus}
    return cleaned
