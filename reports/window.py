"""The idle scan's minutes, kept from pass to pass so that a pass reads only what changed.

Each live allocation's window (the longest idle window, ending at the pass's minute) is
held as dense per-minute arrays: its attributed utilization, whether the minute was read
(its card's rollup exists) and whether it was busy. What the rules need (``idle.Seen``)
and the sparkline are derived from those arrays by ``summarize``, the same code in a
full pass (every minute of the window read from the rollups) and an incremental one
(the stored minutes, slid forward, plus the minutes since the last pass's settled mark),
so the two give the same verdicts whenever they hold the same minutes.

A pass stores the minutes before ``now - SETTLE_MINUTES`` only: the newest minutes are
still being merged (a flush runs after its minute ends), so the next pass reads them
again. A minute before that mark merged again later (samples that came late) is seen
through telemetry's claims (``telemetry.interface.merged_since``) and makes the next
pass a full one.
"""

from __future__ import annotations

import math
import struct
from array import array
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core.cache import cache

from reports import idle
from telemetry.interface import MINUTE_RECORD

# Beat flushes the rollups every 20 s: three minutes back, a minute is merged.
SETTLE_MINUTES = 3
STATE_KEY = "reports:idle-scan:minutes:v1"
_RECORD = struct.Struct(MINUTE_RECORD)


def minute_of(moment: datetime) -> int:
    return int(moment.timestamp()) // 60


def minute_at(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, tz=UTC)


def first_minute_at_or_after(moment: datetime) -> int:
    return math.ceil(moment.timestamp() / 60)


@dataclass(slots=True)
class Minutes:
    """One allocation's minutes ``[first, first + len(read))``; ``key``: what they depend on
    (card, owner, placement, thresholds): a different key reads them again."""

    key: tuple
    first: int
    util: array
    read: bytearray
    busy: bytearray


@dataclass(slots=True)
class State:
    """What a pass keeps for the next: its minute, the first minute it did not keep, the
    window's length, the database snapshot it read under; every allocation's minutes
    ``[first, settled)`` as rows of three flat buffers (one pickled object each, not
    20,000: loading and storing them is a copy); per (card, owner) the last kept minute
    the owner held memory there, and the cards those cover."""

    now: int
    settled: int
    longest: int
    snapshot: str
    first: int = 0
    rows: dict[int, int] = field(default_factory=dict)  # allocation -> row
    keys: list[tuple] = field(default_factory=list)
    util: array = field(default_factory=lambda: array("d"))
    read: bytes = b""
    busy: bytes = b""
    # Each row's sparkline as that pass drew it (NaN: no minute read), ``points`` a row.
    lines: array = field(default_factory=lambda: array("d"))
    points: int = 0
    owners: dict[tuple[int, str], int] = field(default_factory=dict)
    gpus: frozenset[int] = frozenset()

    def kept(self, alloc_id: int, key: tuple) -> int | None:
        """The allocation's row when its minutes were kept under the same key."""
        row = self.rows.get(alloc_id)
        return row if row is not None and self.keys[row] == key else None


def kept_state(
    windows: dict[int, Minutes], lines: dict[int, list], first: int, settled: int, **fields
) -> State:
    """A pass's state: each window's minutes before ``settled`` (all start at ``first``)
    and its sparkline."""
    n = max(settled - first, 0)
    util, read, busy, drawn = array("d"), bytearray(), bytearray(), array("d")
    rows, keys = {}, []
    for alloc_id, got in windows.items():
        rows[alloc_id] = len(keys)
        keys.append(got.key)
        util.extend(got.util[:n])
        read += got.read[:n]
        busy += got.busy[:n]
        drawn.extend(_NAN if v is None else v for v in lines[alloc_id])
    points = len(drawn) // len(keys) if keys else 0
    return State(settled=settled, first=first, rows=rows, keys=keys, util=util,
                 read=bytes(read), busy=bytes(busy), lines=drawn, points=points,
                 **fields)  # fmt: skip


_NAN = float("nan")


def reusable_steps(
    state: State | None, start: int, spark: list[tuple[int, int]]
) -> tuple[int, int]:
    """(m, d): the new sparkline's first ``m`` steps are the kept lines' steps from ``d``
    on, because they cover the same minutes and all of those were settled then (so the
    same arrays give the same averages). (0, 0) when the steps do not line up."""
    if state is None or state.points != len(spark):
        return 0, 0
    old = {
        (state.first + lo, state.first + hi): j
        for j, (lo, hi) in enumerate(spark)
        if hi > lo and state.first + hi <= state.settled
    }
    m, d = 0, None
    for i, (lo, hi) in enumerate(spark):
        j = old.get((start + lo, start + hi))
        if j is None or (d is not None and j - i != d):
            break
        d, m = j - i, i + 1
    return (m, d) if d is not None else (0, 0)


def old_steps(state: State, row: int, d: int, m: int) -> list[float | None]:
    base = row * state.points + d
    return [None if v != v else v for v in state.lines[base : base + m]]


def load() -> State | None:
    state = cache.get(STATE_KEY)
    return state if isinstance(state, State) else None


def save(state: State) -> None:
    # Of no use once the window has slid past it; an hour more for a late beat.
    cache.set(STATE_KEY, state, timeout=state.longest * 60 + 3600)


def forget() -> None:
    cache.delete(STATE_KEY)


_ZEROS: dict[int, array] = {}


def empty(first: int, length: int, key: tuple = ()) -> Minutes:
    zeros = _ZEROS.get(length)
    if zeros is None:
        zeros = _ZEROS[length] = array("d", bytes(8 * length))
    return Minutes(key, first, zeros[:], bytearray(length), bytearray(length))


def slid(state: State, row: int, start: int, length: int) -> Minutes:
    """A kept row's minutes from ``start`` on, in arrays ``length`` long (the rest empty)."""
    out = empty(start, length, state.keys[row])
    n = state.settled - state.first
    lo = start - state.first
    if lo < n:
        base, count = row * n, min(n - lo, length)
        out.util[:count] = state.util[base + lo : base + lo + count]
        out.read[:count] = state.read[base + lo : base + lo + count]
        out.busy[:count] = state.busy[base + lo : base + lo + count]
    return out


def scatter(into: Minutes, packed: bytes) -> None:
    """Write packed minutes (offsets from ``into.first``) into the arrays."""
    util, read, busy = into.util, into.read, into.busy
    for offset, value, is_busy in _RECORD.iter_unpack(packed):
        util[offset] = value
        read[offset] = 1
        busy[offset] = is_busy


def steps(length: int, points: int) -> list[tuple[int, int]]:
    """The sparkline's steps as ranges of minute offsets: ``points`` equal steps over the
    window (a minute in the step its start falls in)."""
    if points <= 0:
        return []
    step = length * 60 / points
    bounds: list[list[int]] = [[length, 0] for _ in range(points)]
    for k in range(length):
        i = min(math.floor(k * 60 / step), points - 1)
        bounds[i][0] = min(bounds[i][0], k)
        bounds[i][1] = max(bounds[i][1], k + 1)
    return [(lo, hi) if lo < hi else (0, 0) for lo, hi in bounds]


def summarize(
    window: Minutes,
    window_start: datetime,
    spark: list[tuple[int, int]],
    drawn: list[float | None] = (),
) -> tuple[idle.Seen, list[float | None]]:
    """What the rules need of a window's minutes (``window.first`` is the range's start)
    and its sparkline: average utilization per step of the minutes read (the first steps
    ``drawn`` already, when they are a kept line's)."""
    read, first = window.read, window.first
    busy_at = window.busy.rfind(1)
    read_at = read.find(1)
    if read_at < 0:
        return idle.Seen(None, None, 0), [None] * len(spark)
    from_offset = max(first_minute_at_or_after(window_start) - first, 0)
    seen = idle.Seen(
        last_busy=minute_at(first + busy_at) if busy_at >= 0 else None,
        first_read=minute_at(first + read_at),
        read_in_window=read.count(1, from_offset),
    )
    util, count = window.util, read.count
    line: list[float | None] = list(drawn)
    for lo, hi in spark[len(line) :]:
        n = count(1, lo, hi)
        line.append(round(sum(util[lo:hi]) / n, 1) if n else None)
    return seen, line


def usable(state: State | None, now: int, longest: int, last_scanned: datetime | None) -> bool:
    """Whether a pass at ``now`` may start from ``state``: the same window, not older than
    the window, and the state of the last pass that wrote the verdicts (another pass, a
    full one by hand, may have run since)."""
    return (
        state is not None
        and state.longest == longest
        and state.now <= now
        and now - state.settled <= longest
        and last_scanned is not None
        and minute_of(last_scanned) == state.now
    )


def settled_at(now: int) -> int:
    return now - SETTLE_MINUTES


def owners_in_window(owners: dict[tuple[int, str], int], start: int) -> set[tuple[int, str]]:
    return {pair for pair, last in owners.items() if last >= start}


def merged_owners(
    kept: dict[tuple[int, str], int], new: dict[tuple[int, str], int], start: int
) -> dict[tuple[int, str], int]:
    """The kept last-seen minutes with new ones folded in, those before ``start`` dropped."""
    out = {pair: last for pair, last in kept.items() if last >= start}
    for pair, minute in new.items():
        if minute >= start and minute > out.get(pair, -1):
            out[pair] = minute
    return out


def since_for(placed_at: datetime, settled: int) -> datetime:
    return max(placed_at, minute_at(settled))
