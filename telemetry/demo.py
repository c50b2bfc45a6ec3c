"""The demo's history (``manage.py demo``): the minutes of the last day the rollups lack,
filled from what the simulated agents would have reported then. Each minute goes the way
a poll cycle's readings go: into the sample buffer (``sample_buffer.buffer_samples``),
then through ``rollups.flush`` into the minute and hour rollups, so charts, the idle
scan and the accounting read it as any history. Wired in by the project's demo command,
which gets the readings from the simulator (``agents/gpu_agent/replay.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from agents.models import GPU, Node
from telemetry import rollups, sample_buffer
from telemetry.models import GpuMinute

MINUTE = timedelta(minutes=1)
# Minutes merged per flush: the buffer holds at most this many minutes of the fleet.
FLUSH_EVERY = 60


def minute_floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def missing_minutes(node_names: Iterable[str], start: datetime, end: datetime) -> list[datetime]:
    """The minutes in ``[start, end)`` with no rollup for any card of these nodes."""
    start, end = minute_floor(start), minute_floor(end)
    have = set(
        GpuMinute.objects.filter(
            gpu__node__name__in=list(node_names), bucket__gte=start, bucket__lt=end
        )
        .values_list("bucket", flat=True)
        .distinct()
    )
    count = int((end - start) / MINUTE)
    return [m for m in (start + i * MINUTE for i in range(count)) if m not in have]


def backfill(readings: Iterable[tuple[datetime, dict[str, dict]]]) -> int:
    """Write readings of minutes past (each a moment and node name -> its agent's portal
    view, in time order) into the rollups, as the poll cycles and the flushes of those
    minutes would have; returns the GPU-minutes written."""
    node_ids = dict(Node.objects.values_list("name", "pk"))
    gpu_ids = dict(GPU.objects.values_list("uuid", "pk"))
    written = minutes = 0
    minute = None
    for moment, views in readings:
        if minute_floor(moment) != minute:
            if minute is not None and (minutes := minutes + 1) % FLUSH_EVERY == 0:
                written += rollups.flush(minute + MINUTE)
            minute = minute_floor(moment)
        answered = {node_ids[name]: view for name, view in views.items() if name in node_ids}
        sample_buffer.buffer_samples(answered, gpu_ids, moment)
    if minute is not None:
        written += rollups.flush(minute + MINUTE)
    return written
