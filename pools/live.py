"""The pool page's live path: what its websocket is sent, and when.

Two messages. ``pool.changed`` after a transaction that placed, released or moved slices
on the pool's cards, or changed the pool, commits: each socket then reads the picture
again as its own user may see it (owner labels differ between viewers), so the group
message carries nothing but the news. ``pool.usage`` after each poll cycle: the latest
readings of the pool's cards, the same for everyone, encoded once and forwarded as text.

Both go only to pools someone watches: a pool page's socket keeps a short-lived mark in
one Redis sorted set, and a cycle costs one read of it when nobody watches any pool.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from pools.capacity import usage
from pools.models import PoolCard
from portal import redis_client

WATCH_TTL_S = 60


def pool_group(pool_id: int) -> str:
    return f"pool.{pool_id}"


def _watched_key() -> str:
    return redis_client.key("pools", "watched")


def watch(pool_id: int) -> None:
    redis_client.watch(_watched_key(), pool_id, WATCH_TTL_S)


def watched() -> set[int]:
    """The pools someone watches now."""
    return redis_client.watched(_watched_key())


def encode(kind: str, pool_id: int, key: str, value) -> dict:
    message = {"type": kind, "pool": pool_id, "sent_at": time.time(), key: value}
    return {"type": kind, "text": orjson.dumps(message).decode()}


def _send(messages: list[tuple[str, dict]]) -> None:
    layer = get_channel_layer()
    if layer is None or not messages:
        return

    async def send_all() -> None:
        for group, message in messages:
            await layer.group_send(group, message)

    async_to_sync(send_all)()


def pool_changed(pool_id: int) -> None:
    """Tell the pool's pages to read it again, once the current transaction commits."""
    transaction.on_commit(lambda: pools_changed([pool_id]))


def pools_changed(pool_ids: Iterable[int], watching: set[int] | None = None) -> None:
    """Tell these pools' pages, now (call it after commit)."""
    if watching is None:
        watching = watched()
    _send([(pool_group(p), {"type": "pool.changed"}) for p in set(pool_ids) if p in watching])


def pools_on_nodes(node_ids: Iterable[int], among: set[int]) -> list[int]:
    """Those of ``among`` that have cards on these nodes."""
    if not among:
        return []
    return list(
        PoolCard.objects.filter(pool_id__in=among, gpu__node_id__in=list(node_ids))
        .values_list("pool_id", flat=True)
        .distinct()
    )


def read_watched(pipe) -> None:
    """Put the read of ``watched`` on a Redis pipeline; ``redis_client.watched_of`` reads
    its answer."""
    redis_client.read_watched(pipe, _watched_key())


def nodes_changed(node_ids: Iterable[int], watching: set[int] | None = None) -> None:
    """Slices on these nodes changed (``desired_state_changed``): their pools' pages.
    ``watching``: the watched pools, when the caller read them already."""
    if watching is None:
        watching = watched()  # one Redis round trip; none of it when no page is open
    if watching:
        pools_changed(pools_on_nodes(node_ids, watching), watching)


def publish_usage(node_ids: Iterable[int]) -> None:
    """After a poll cycle: fresh readings for the watched pools with cards on these nodes."""
    pool_ids = pools_on_nodes(node_ids, watched())
    _send([(pool_group(p), encode("pool.usage", p, "usage", usage(p))) for p in pool_ids])
