"""One short history of two cards, flushed as beat flushes it, and the rollups it must give.

Played by ``test_rollups.py`` through Redis and through the in-process Redis (in the
test's process, and in a child started without REDIS_URL), all held to the same
hand-computed rows. It covers: fields not reported (None), several
processes of one owner on a card, readings
too large to be plausible (not reported either, so the databases never overflow), samples
that arrive after their minute was flushed, and hours built from two minutes.
Imports nothing from Django at module level, so the child can import it before setup.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)

# Card A (index 0) and card B (index 1) of one node; per cycle: A's fields, B's fields.
# A field left out is one the card did not report; one of 1e15 or more is taken as not
# reported (rollup_sql.LIMIT_SQL).
CYCLES_MINUTE_0 = [
    ({"utilization_gpu_pct": 10, "memory_used_mib": 1000, "power_w": 100.0, "temperature_c": 50,
      "processes": [{"pid": 1, "user": "carol", "memory_used_mib": 500},
                    {"pid": 2, "user": "carol", "memory_used_mib": 100},
                    {"pid": 3, "user": "dave", "memory_used_mib": 50},
                    {"pid": 4, "memory_used_mib": 999}]},  # no owner: not counted
     {"utilization_gpu_pct": 0, "temperature_c": 30, "power_w": 1e308}),
    ({"utilization_gpu_pct": 20, "memory_used_mib": 2000, "power_w": 200.0, "temperature_c": 60,
      "processes": [{"pid": 1, "user": "carol", "memory_used_mib": 700}]},
     {"utilization_gpu_pct": 50, "temperature_c": 30, "memory_used_mib": -1e18}),
    ({"utilization_gpu_pct": 60, "memory_used_mib": 3000, "temperature_c": 70, "power_w": 1e155,
      "processes": [{"pid": 3, "user": "dave", "memory_used_mib": 150}]},
     {"utilization_gpu_pct": 100, "temperature_c": 30}),
]  # fmt: skip
# Polled at 10:00:59, recorded after minute 0 was flushed; card B did not answer.
LATE_CYCLE_MINUTE_0 = (
    {"utilization_gpu_pct": 70, "memory_used_mib": 6000, "temperature_c": 40,
     "processes": [{"pid": 1, "user": "carol", "memory_used_mib": 1100},
                   {"pid": 5, "user": "eve", "memory_used_mib": 5e17}]},
    None,
)  # fmt: skip
CYCLE_MINUTE_1 = (
    {"utilization_gpu_pct": 50, "memory_used_mib": 1000, "power_w": 300.0, "temperature_c": 45,
     "processes": [{"pid": 1, "user": "carol", "memory_used_mib": 200},
                   {"pid": 3, "user": "dave", "memory_used_mib": 250}]},
    {"utilization_gpu_pct": 10, "temperature_c": 35},
)  # fmt: skip

# Rows as (card index, minute or hour offset[, owner]) -> (samples, then avg and max per
# field). Averages are over the samples that had the field; merging a late claim into a
# minute, and minutes into their hour, weighs each side by its samples.
GPU_MINUTES = {
    # util 10 20 60 | late 70; memory 1000 2000 3000 | 6000; power 100 200 - | -; temp 50 60 70 | 40
    (0, 0): [4, 40.0, 70.0, 3000.0, 6000.0, 150.0, 200.0, 55.0, 70.0],
    (1, 0): [3, 50.0, 100.0, None, None, None, None, 30.0, 30.0],
    (0, 1): [1, 50.0, 50.0, 1000.0, 1000.0, 300.0, 300.0, 45.0, 45.0],
    (1, 1): [1, 10.0, 10.0, None, None, None, None, 35.0, 35.0],
}
GPU_HOURS = {
    # power: (150 x 4 samples + 300 x 1) / 5, weighed by samples, as every merge is.
    (0, 0): [5, 42.0, 70.0, 2600.0, 6000.0, 180.0, 300.0, 53.0, 70.0],
    (1, 0): [4, 40.0, 100.0, None, None, None, None, 31.25, 35.0],
}
OWNER_MINUTES = {
    # carol: 600 (her two processes), 700, late 1100
    (0, 0, "carol"): [3, 800.0, 1100.0],
    (0, 0, "dave"): [2, 100.0, 150.0],
    (0, 1, "carol"): [1, 200.0, 200.0],
    (0, 1, "dave"): [1, 250.0, 250.0],
    (0, 0, "eve"): [1, None, None],  # only readings of 1e15 and more
}
OWNER_HOURS = {
    (0, 0, "carol"): [4, 650.0, 1100.0],
    (0, 0, "dave"): [3, 150.0, 250.0],
    (0, 0, "eve"): [1, None, None],
}
EXPECTED = {
    "gpu_minutes": GPU_MINUTES,
    "gpu_hours": GPU_HOURS,
    "owner_minutes": OWNER_MINUTES,
    "owner_hours": OWNER_HOURS,
}


def play(cards: list[Any]) -> list[int]:
    """Buffer and flush the history for ``cards`` (A, B); the GPU-minutes each flush wrote."""
    from telemetry import rollups, sample_buffer

    def cycle(at: datetime, fields: tuple[dict | None, dict | None]) -> None:
        gpus = [
            {"uuid": card.uuid, "index": card.index, **readings}
            for card, readings in zip(cards, fields, strict=True)
            if readings is not None
        ]
        ids = {card.uuid: card.pk for card in cards}
        sample_buffer.buffer_samples({cards[0].node_id: {"gpus": gpus}}, ids, at)

    written = []
    for second, fields in zip((0, 20, 40), CYCLES_MINUTE_0, strict=True):
        cycle(T0 + timedelta(seconds=second), fields)
    written.append(rollups.flush(T0 + timedelta(minutes=1, seconds=2)))
    cycle(T0 + timedelta(seconds=59), LATE_CYCLE_MINUTE_0)
    cycle(T0 + timedelta(minutes=1, seconds=5), CYCLE_MINUTE_1)
    written.append(rollups.flush(T0 + timedelta(minutes=2, seconds=2)))
    # Long enough after for the minutes to have been folded into their hours.
    written.append(rollups.flush(T0 + timedelta(minutes=10, seconds=2)))
    return written


def rows(cards: list[Any]) -> dict[str, dict[tuple, list]]:
    """Every rollup row of ``cards``, keyed as in EXPECTED."""
    from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute

    index = {card.pk: card.index for card in cards}
    gpu_values = ["samples", "util_avg", "util_max", "memory_used_avg_mib",
                  "memory_used_max_mib", "power_avg_w", "power_max_w",
                  "temperature_avg_c", "temperature_max_c"]  # fmt: skip
    owner_values = ["samples", "memory_used_avg_mib", "memory_used_max_mib"]
    out: dict[str, dict[tuple, list]] = {}
    for name, model, step, values in (
        ("gpu_minutes", GpuMinute, 60, gpu_values),
        ("gpu_hours", GpuHour, 3600, gpu_values),
        ("owner_minutes", OwnerMinute, 60, owner_values),
        ("owner_hours", OwnerHour, 3600, owner_values),
    ):
        owner = ["owner"] if model in (OwnerMinute, OwnerHour) else []
        out[name] = {}
        for row in model.objects.values("gpu_id", "bucket", *owner, *values):
            offset = int((row["bucket"] - T0).total_seconds()) // step
            key = (index[row["gpu_id"]], offset, *[row[o] for o in owner])
            out[name][key] = [_rounded(row[v]) for v in values]
    return out


def _rounded(value: float | None) -> float | None:
    # The database may differ from the hand computation in the last bits of an average.
    return None if value is None else round(float(value), 6)
