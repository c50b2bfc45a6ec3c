"""The rollups' SQL, built once from the reading schema.

Raw SQL on purpose: a minute of a 1,000-node fleet is 96,000 samples and 8,000 rows. The
database does the work: each column of a minute's blobs goes in as one PostgreSQL array
parameter (``unnest``), and one statement per table aggregates the samples and writes the
minute rows (and, for a minute folded already, merges into its hours in the same
statement, through a data-modifying CTE). Upserts are ON CONFLICT ... DO UPDATE.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from agents.gpu_agent import schema
from agents.models import GPU
from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute

# (field, its avg and max columns) of what history keeps, from the reading schema.
GPU_HISTORY = [(f.name, f.history.columns()) for f in schema.HISTORY_GPU_FIELDS]
OWNER_HISTORY = [(f.name, f.history.columns()) for f in schema.HISTORY_PROCESS_FIELDS]
# Sample columns are bound as v0, v1... in the order of the history fields.
GPU_PARAMS = [f"v{i}" for i in range(len(GPU_HISTORY))]
OWNER_PARAMS = [f"v{i}" for i in range(len(OWNER_HISTORY))]
# Readings this large or larger are not aggregated (treated as not reported): avg()
# sums their squares, which overflows float8 ("value out of range") from about 1e154.
LIMIT_SQL = "1e15"
CLAIMS_TABLE = "telemetry_rollupclaim"

_GPU_KEYS, _OWNER_KEYS = ["gpu_id", "bucket"], ["gpu_id", "owner", "bucket"]
_TABLES = (
    # minute model, hour model, keys, value columns, sample params, with owners
    (GpuMinute, GpuHour, _GPU_KEYS, GPU_HISTORY, GPU_PARAMS, False),
    (OwnerMinute, OwnerHour, _OWNER_KEYS, OWNER_HISTORY, OWNER_PARAMS, True),
)


@dataclass(frozen=True)
class Statements:
    # minute model -> (the minute's hours merged at once, its rows may exist) -> statement
    merge: dict[type, dict[tuple[bool, bool], str]]
    fold: list[str]


def _columns(history: list) -> list[str]:
    return [c for _, pair in history for c in pair]


def _merge_clause(table: str, keys: list[str], columns: list[str]) -> str:
    """Fold new samples into a row: sample-weighted averages, maxima of maxima."""
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


def _samples(params: list[str], owners: bool) -> str:
    """The samples as rows (gpu_id[, owner], v0, v1, ...)."""
    # Set-returning functions in the select list run in lockstep and stream (ProjectSet);
    # in FROM (``unnest(a, b, ...)``) each would be materialized first, which took twice
    # as long for 96,000 samples.
    owner = "json_array_elements_text(%(owners)s::json) AS owner, " if owners else ""
    values = ", ".join(f"unnest(%({v})s::float8[]) AS {v}" for v in params)
    return f"(SELECT unnest(%(ids)s::bigint[]) AS gpu_id, {owner}{values}) AS s"


def _aggregate(keys: list[str], history: list, params: list[str], owners: bool):
    group = ", ".join(k for k in keys if k != "bucket")
    aggregates = ", ".join(
        f"avg({v}) FILTER (WHERE abs({v}) < {LIMIT_SQL}) AS {avg}, "
        f"max({v}) FILTER (WHERE abs({v}) < {LIMIT_SQL}) AS {peak}"
        for v, (_, (avg, peak)) in zip(params, history, strict=True)
    )
    return (
        f"SELECT {group}, count(*) AS samples, {aggregates} "  # noqa: S608
        f"FROM {_samples(params, owners)} GROUP BY {group}"
    )


def _merge(minute_model, hour_model, keys, history, params, owners, *, hours, upsert):
    """Aggregate the samples, write them into the minutes (and the hours).

    With ``hours``, the samples are merged into both: folding a minute's new samples into
    its hour is the same merge as folding them into the minute. Without ``upsert`` the
    minute rows are plain inserts (a minute not written yet), cheaper than ON CONFLICT.
    """
    minute, hour = minute_model._meta.db_table, hour_model._meta.db_table
    columns = _columns(history)
    names = ", ".join([*keys, "samples", *columns])
    values = ", ".join([k for k in keys if k != "bucket"] + ["%(bucket)s", "samples", *columns])
    into_minutes = f"INSERT INTO {minute} ({names}) SELECT {values} FROM live"  # noqa: S608
    if upsert:
        into_minutes += _merge_clause(minute, keys, columns)
    into_hours = (
        f"INSERT INTO {hour} ({names}) "  # noqa: S608
        f"SELECT {values.replace('%(bucket)s', '%(hour)s')} FROM live"
        f"{_merge_clause(hour, keys, columns)}"
    )
    cte = (
        f"WITH agg AS ({_aggregate(keys, history, params, owners)}), "  # noqa: S608
        # Cards deleted since they were sampled have no history to keep. In key order,
        # so two merges of the same rows lock them in the same order (no deadlock).
        f"live AS (SELECT * FROM agg WHERE gpu_id IN (SELECT id FROM {GPU._meta.db_table}) "
        f"ORDER BY {', '.join(k for k in keys if k != 'bucket')})"
    )
    if not hours:
        return f"{cte} {into_minutes}"
    return f"{cte}, minute AS ({into_minutes}) {into_hours}"


def _fold(minute_model, hour_model, keys: list[str], history: list) -> str:
    """Fold a range of minutes into their hours (averages weighted by the samples of the
    minutes that have a value)."""
    minute, hour = minute_model._meta.db_table, hour_model._meta.db_table
    columns = _columns(history)
    group = [k for k in keys if k != "bucket"]
    present = {c: f"FILTER (WHERE {c} IS NOT NULL)" for c in columns}
    folded = [
        f"sum({c} * samples) {present[c]} / sum(samples) {present[c]}"
        if "_avg" in c
        else f"max({c}) {present[c]}"
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


@cache
def statements() -> Statements:
    return Statements(
        merge={
            table[0]: {
                (hours, upsert): _merge(*table, hours=hours, upsert=upsert)
                for hours in (False, True)
                for upsert in (False, True)
            }
            for table in _TABLES
        },
        fold=[_fold(*table[:4]) for table in _TABLES],
    )
