"""Pools' receivers, connected in ``PoolsConfig.ready``. The agent sync's only queue a
task, so neither a placement's commit nor a poll cycle waits for an agent; the pool pages'
are one cheap query when nothing is new or watched."""

from __future__ import annotations

from pools import configuration, live, tasks
from portal import redis_client
from telemetry.interface import PollCycle


def on_desired_state_changed(sender, node_ids: frozenset[int], **kwargs) -> None:
    """Queue the nodes' agent sync and tell their watched pool pages, with one Redis round
    trip for both (every placement and release commits this: two were a tenth of its
    CPU). The pages are told even when queueing a send failed."""
    pipe = redis_client.client().pipeline(transaction=False)
    ordered = tasks.mark_queued(pipe, node_ids)
    live.read_watched(pipe)
    *added, watching = pipe.execute()
    try:
        tasks.queue_marked(ordered, added)
    finally:
        live.nodes_changed(node_ids, redis_client.watched_of(watching))


def on_poll_cycle_recorded(sender, cycle: PollCycle, **kwargs) -> None:
    # One Redis round trip per chunk; the task (queued at most once a second) reads them all.
    tasks.note_cycle(cycle.answered, cycle.came_back)


def on_poll_cycle_for_pools(sender, cycle: PollCycle, **kwargs) -> None:
    """New cards join the rule pools that match them; watched pool pages get readings."""
    configuration.join_new_cards(cycle.answered)
    live.publish_usage(cycle.answered)
