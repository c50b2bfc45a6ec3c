"""Pools' receivers, connected in ``PoolsConfig.ready``: each only queues a task, so
neither a placement's commit nor a poll cycle waits for an agent."""

from __future__ import annotations

from pools import tasks
from telemetry.interface import PollCycle


def on_desired_state_changed(sender, node_ids: frozenset[int], **kwargs) -> None:
    tasks.queue_sync(node_ids)


def on_poll_cycle_recorded(sender, cycle: PollCycle, **kwargs) -> None:
    # One Redis round trip per chunk; the task (queued at most once a second) reads them all.
    tasks.note_cycle(cycle.answered, cycle.came_back)
