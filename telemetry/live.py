"""The live path: what each websocket page is sent after a poll commits.

The fleet page gets one tile per node (aggregates, never 8,000 cards); a node
page gets that node's cards, and only while someone watches it: a node page's
consumer keeps a short-lived "watched" key fresh, and the publisher sends card
details only for nodes whose key exists. One cache read per cycle decides that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache

from agents.models import Node
from portal import redis_client
from telemetry import readings

FLEET_GROUP = "fleet"
# Node managers' sockets join these too: the agents' error texts, which members never get
# (agents.permissions.can_see_agent_details). Tiles and cards only say that there is one.
FLEET_ERRORS_GROUP = "fleet.errors"
# A watcher refreshes its key on every update it gets; a vanished one lapses after this.
WATCH_TTL_S = 60


def node_group(node_id: int) -> str:
    return f"node.{node_id}"


def node_errors_group(node_id: int) -> str:
    return f"node.{node_id}.errors"


def _watched_key() -> str:
    # Watched nodes in one sorted set scored by expiry: one command per check, not one key
    # per node (the check runs every cycle for every node polled).
    return redis_client.key("live", "watched")


def watch(node_id: int) -> None:
    redis_client.watch(_watched_key(), node_id, WATCH_TTL_S)


def watched(node_ids: Iterable[int]) -> list[int]:
    """Those of the given nodes that someone watches now."""
    watching = redis_client.watched(_watched_key())
    return [i for i in node_ids if i in watching] if watching else []


# Dashboards that open together share one picture of the fleet, at most this old;
# the pushes that follow bring them current.
PICTURE_TTL_S = 2


_PICTURE_KEYS = ("live:fleet-picture", "live:fleet-errors")


# Dashboards connecting together wait for one of them to build the picture, rather than
# each building its own (a tenth of a second of CPU at 1,000 nodes).
_picture_lock = threading.Lock()


def _pictures() -> list[str]:
    texts = cache.get_many(_PICTURE_KEYS)
    if len(texts) < len(_PICTURE_KEYS):
        with _picture_lock:
            texts = _cached_or_built_pictures()
    return [texts[key] for key in _PICTURE_KEYS]


def _cached_or_built_pictures() -> dict[str, str]:
    texts = cache.get_many(_PICTURE_KEYS)
    if len(texts) < len(_PICTURE_KEYS):
        tiles, errors = readings.node_summaries_and_errors()
        texts = dict(
            zip(_PICTURE_KEYS, [encode("fleet.nodes", "nodes", tiles)["text"],
                                encode_errors("fleet.errors", errors)["text"]], strict=True)
        )  # fmt: skip
        cache.set_many(texts, timeout=PICTURE_TTL_S)
    return texts


def fleet_picture() -> str:
    """The fleet page's first message (every tile), shared for a moment between connects."""
    return _pictures()[0]


def fleet_errors_picture() -> str:
    """For node managers: every node's error text, sent after the tiles."""
    return _pictures()[1]


def publish_nodes(
    node_ids: list[int],
    latest: dict[int, dict[str, Any]] | None = None,
    rows: list[dict[str, Any]] | None = None,
    *,
    fetched_at: float | None = None,
) -> None:
    """Push fresh tiles to the fleet page and fresh cards to watched node pages.

    ``latest`` and ``rows`` (the nodes as readings.node_summaries reads them) save the
    reads when the caller has them in hand, as the poller does. ``fetched_at``: when
    the poll's answers were in, carried along to time the stages.
    """
    layer = get_channel_layer()
    if layer is None or not node_ids:
        return
    summaries, errors = readings.node_summaries_and_errors(node_ids, latest, rows)
    send = async_to_sync(_send_all)
    details = []
    for node in Node.objects.filter(pk__any=watched(node_ids)):
        details.append((readings.node_detail(node, (latest or {}).get(node.pk)), node.last_error))
    send(layer, summaries, errors, details, fetched_at)


def encode(
    kind: str, key: str, value: Any, fetched_at: float | None = None, newest: float | None = None
) -> dict:
    """A group message carrying the browser's JSON already encoded.

    Encoding once here, instead of once per consumer, is what keeps 200 dashboards
    on a 1,000-node fleet cheap: each consumer only forwards the text.
    """
    # sent_at lets a client (and bench/live) tell server-side from delivery latency.
    # Stamps first, the payload last: bench/live reads them without parsing 250 tiles.
    message: dict[str, Any] = {"type": kind, "sent_at": time.time()}
    if fetched_at is not None:
        message["fetched_at"] = fetched_at
    if newest is not None:  # the newest reading in the message (collected_at)
        message["collected_at"] = newest
    message[key] = value
    return {"type": kind, "text": orjson.dumps(message).decode()}


def encode_errors(kind: str, errors: dict[int, str]) -> dict:
    """Error texts by node id, for the node managers' groups."""
    return encode(kind, "errors", {str(node_id): text for node_id, text in errors.items()})


async def _send_all(
    layer,
    summaries: list[dict],
    errors: dict[int, str],
    details: list[tuple[dict, str]],
    fetched_at: float | None = None,
) -> None:
    # One event-loop hop for the whole cycle, not one per group. A tile or card without
    # an error clears its text on the page: only the texts still there are sent.
    newest = max((t["collected_at"] for t in summaries if t.get("collected_at")), default=None)
    message = encode("fleet.nodes", "nodes", summaries, fetched_at, newest)
    await layer.group_send(FLEET_GROUP, message)
    if errors:
        await layer.group_send(FLEET_ERRORS_GROUP, encode_errors("fleet.errors", errors))
    for detail, error in details:
        node_id = detail["id"]
        message = encode("node.detail", "node", detail, fetched_at, detail.get("collected_at"))
        await layer.group_send(node_group(node_id), message)
        if error:
            message = encode_errors("node.errors", {node_id: error})
            await layer.group_send(node_errors_group(node_id), message)
