"""Pools' Celery tasks: agent sync, the report after each poll cycle, reconciliation.

Tasks take ids, are idempotent, and are coalesced where bursts are expected: a node's
desired state is queued once however many placements change it meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict

from celery import shared_task

from pools import agent_reports, failover, reconcile, sync
from portal import redis_client

logger = logging.getLogger(__name__)

# Placements in a burst land in one send: the first queues it this much later.
SYNC_DELAY_S = 0.5
# A node whose report differs from ours is sent its state at most this often.
RESEND_COOLDOWN_S = 10


def _queued_key(node_id: int) -> str:
    return redis_client.key("pools", "sync-queued", node_id)


def _add(key: str, seconds: int) -> bool:
    """Set ``key`` unless it is set (Django's cache.add, without building a Redis client
    per call: that cost more than the rest of a placement)."""
    return bool(redis_client.client().set(key, 1, ex=seconds, nx=True))


# A node's "queued" mark lasts this long at most (its send deletes it as it starts).
QUEUED_TTL_S = 60


def mark_queued(pipe, node_ids: Iterable[int]) -> list[int]:
    """Put on a Redis pipeline each node's "queued" mark, set unless set: ``queue_marked``
    then queues a send of those whose mark was new (the pipeline's answers, in order).
    Split so that a placement's receiver sends these and its other reads in one round
    trip (``pools.receivers``)."""
    ordered = sorted(set(node_ids))
    for node_id in ordered:
        pipe.set(_queued_key(node_id), 1, ex=QUEUED_TTL_S, nx=True)
    return ordered


def queue_marked(node_ids: list[int], added: Iterable) -> int:
    queued = 0
    for node_id, new in zip(node_ids, added, strict=True):
        if new:
            sync_desired_state.apply_async((node_id,), countdown=SYNC_DELAY_S)
            queued += 1
    return queued


def queue_sync(node_ids: Iterable[int], *, cooldown: bool = False) -> int:
    """Queue a send of each node's desired state unless one is queued already; with
    ``cooldown``, also unless one was queued in the last RESEND_COOLDOWN_S. Returns how
    many were queued."""
    ordered = [
        node_id for node_id in sorted(set(node_ids))
        if not cooldown or _add(redis_client.key("pools", "resent", node_id), RESEND_COOLDOWN_S)
    ]  # fmt: skip
    # The key goes when the send starts, so a change made during a send queues another.
    return queue_marked(ordered, [_add(_queued_key(node_id), QUEUED_TTL_S) for node_id in ordered])


# Late acks: the node is sent its whole desired state, never a change, so a send again
# after a lost worker tells the agent what it already has.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def sync_desired_state(node_id: int) -> dict:
    redis_client.client().delete(_queued_key(node_id))
    outcome = sync.sync_node(node_id)
    if outcome.error:
        logger.info("desired state of node %s not taken: %s", node_id, outcome.error)
    return asdict(outcome)


# The nodes answered since the last after_poll_cycle ran, and those back from offline:
# one Redis list entry per chunk ("ids|came-back ids"), so a cycle costs one round trip
# per chunk (one joined string packs far cheaper than an argument per node).
CYCLE_DELAY_S = 1.0
NOTED_MAX = 10_000  # chunks kept when no worker reads them


def _cycle_keys() -> tuple[str, str]:
    return redis_client.key("pools", "answered"), redis_client.key("pools", "cycle-queued")


def note_cycle(answered: Iterable[int], came_back: Iterable[int]) -> None:
    answered = ",".join(map(str, answered))
    if not answered:
        return
    noted_key, queued_key = _cycle_keys()
    pipe = redis_client.client().pipeline(transaction=False)
    pipe.rpush(noted_key, f"{answered}|{','.join(map(str, came_back))}")
    pipe.ltrim(noted_key, -NOTED_MAX, -1)
    pipe.set(queued_key, 1, nx=True, ex=60)
    if pipe.execute()[-1]:
        after_poll_cycle.apply_async(countdown=CYCLE_DELAY_S)


def _ids(text: str) -> set[int]:
    return {int(n) for n in text.split(",") if n.isdigit()}


def _take_noted() -> tuple[list[int], list[int]]:
    noted_key, queued_key = _cycle_keys()
    pipe = redis_client.client().pipeline(transaction=True)
    pipe.lrange(noted_key, 0, -1)
    pipe.delete(noted_key, queued_key)
    entries, _ = pipe.execute()
    answered: set[int] = set()
    came_back: set[int] = set()
    for entry in entries:
        ids, _, back = entry.decode().partition("|")
        answered |= _ids(ids)
        came_back |= _ids(back)
    return sorted(answered), sorted(came_back)


# Late acks: comparing reports, marking and cordoning are judged on the state they find
# (a card already cordoned or moved is left as it is), so a run again changes nothing twice.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def after_poll_cycle(answered: list[int] | None = None, came_back: list[int] | None = None) -> dict:
    """Read the agents' reports (of the nodes noted since the last run, or those given):
    confirm slices, re-send where they differ, cordon faulty cards, re-place the slices
    of cards found lost."""
    if answered is None:
        answered, came_back = _take_noted()
    came_back = came_back or []
    outcome = agent_reports.compare(answered, came_back)
    failover.apply_marks(outcome.marks)
    for card_id, reason in outcome.cordons:
        failover.cordon_card(card_id, reason)
    moves = failover.move_failed(answered)
    queued = queue_sync(outcome.resend, cooldown=True)
    return {
        "confirmed": outcome.confirmed, "resent": queued, "cordoned": len(outcome.cordons),
        "moved": len(moves.moved), "stranded": len(moves.stranded),
    }  # fmt: skip


# Late acks: reconciliation compares and repairs; a second pass finds nothing to repair.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def reconcile_pools() -> dict:
    """Beat: reconcile, re-place what failed, retry the stranded, re-send periodically."""
    result = reconcile.reconcile()
    queue_sync(result.resend)
    return {
        "found": dict(result.found), "counters_fixed": result.counters_fixed,
        "moved": result.moved, "stranded": result.stranded, "resend": len(result.resend),
    }  # fmt: skip
