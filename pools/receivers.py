"""Pools' receivers, connected in ``PoolsConfig.ready``. The agent sync's only queue a
task, so neither a placement's commit nor a poll cycle waits for an agent; the pool pages'
are one cheap query when nothing is new or watched."""

from __future__ import annotations

from pools import configuration, live, tasks
from telemetry.interface import PollCycle


def on_desired_state_changed(sender, node_ids: frozenset[int], **kwargs) -> None:
    tasks.queue_sync(node_ids)


def on_poll_cycle_recorded(sender, cycle: PollCycle, **kwargs) -> None:
    # One Redis round trip per chunk; the task (queued at most once a second) reads them all.
    tasks.note_cycle(cycle.answered, cycle.came_back)


def on_poll_cycle_for_pools(sender, cycle: PollCycle, **kwargs) -> None:
    """New cards join the rule pools that match them; watched pool pages get readings."""
    configuration.join_new_cards(cycle.answered)
    live.publish_usage(cycle.answered)


def on_slices_changed_for_pages(sender, node_ids: frozenset[int], **kwargs) -> None:
    live.nodes_changed(node_ids)
