"""The developer's home live: after each poll cycle, the use of the vGPUs its open pages
show, pushed to their holders' sockets (``/ws/home/``).

Only for homes someone has open: a home's socket keeps its user in one Redis sorted set
(a mark renewed while the socket lives), so a cycle costs one read of it when no home is
open, and otherwise one query for the watched users' vGPUs on the nodes that answered.
The push carries numbers only (``home.use_row``), to the holder alone.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from pools.models import Allocation
from portal import redis_client
from quotas.requests.home import LIVE, live_use, use_row
from telemetry.interface import PollCycle

WATCH_TTL_S = 120  # the socket renews it every WATCH_TTL_S / 3 (consumers.HomeConsumer)


def home_group(user_id: int) -> str:
    return f"home.user.{user_id}"


def _watched_key() -> str:
    return redis_client.key("home", "watched")


def watch(user_id: int) -> None:
    redis_client.watch(_watched_key(), user_id, WATCH_TTL_S)


def watched() -> set[int]:
    """The users with a home open now."""
    return redis_client.watched(_watched_key())


def use_message(rows: list[dict]) -> dict:
    text = orjson.dumps({"type": "home.use", "vgpus": rows}).decode()
    return {"type": "home.use", "text": text}


def uses_on(node_ids: Iterable[int], users: set[int]) -> dict[int, list[dict]]:
    """Per watched user, the use of their live vGPUs on these nodes."""
    if not users:
        return {}
    allocations = list(
        Allocation.objects.filter(
            lease__holder_id__in=users, state__in=LIVE, gpu__node_id__in=list(node_ids)
        ).select_related("gpu", "lease")
    )
    use = live_use(allocations)
    out: dict[int, list[dict]] = {}
    for a in allocations:
        out.setdefault(a.lease.holder_id, []).append(use_row(use[a.pk]))
    return out


def publish_use(node_ids: Iterable[int]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    by_user = uses_on(node_ids, watched())
    if not by_user:
        return

    async def send_all() -> None:
        for user_id, rows in by_user.items():
            await layer.group_send(home_group(user_id), use_message(rows))

    async_to_sync(send_all)()


def on_poll_cycle_recorded(sender, cycle: PollCycle, **kwargs) -> None:
    if cycle.answered:
        publish_use(cycle.answered)
