"""Waiting for a GPU request to leave the waiting states (``GET .../?wait=N``, docs/api.md).

The waiter listens where the live pages do: every step of a request is published after
commit to its tenant's channel-layer group (quotas.requests.notices), from whichever process made
it (web or Celery worker). The waiter joins that group on a channel of its own *before*
reading the state, so no step is missed between the read and the wait, then reads the row
again on each event about its request; a slow re-read every RECHECK_SECONDS covers a step
published nowhere. The cost: the waiting HTTP request holds its worker thread and a
channel-layer connection (and its idle database connection, as any request does).
"""

from __future__ import annotations

import asyncio
import time

import orjson
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer

from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests.notices import tenant_group

MAX_WAIT_SECONDS = 60
RECHECK_SECONDS = 5.0
WAITING_STATES = frozenset({RequestState.PENDING, RequestState.APPROVED})


def _state(request_id: int) -> str | None:
    return GpuRequest.objects.filter(pk=request_id).values_list("state", flat=True).first()


def _concerns(message: dict, request_id: int) -> bool:
    try:
        return orjson.loads(message.get("text") or b"{}").get("request") == request_id
    except orjson.JSONDecodeError:
        return True  # unreadable: read the row rather than miss a step


async def _wait(layer, request_id: int, tenant_id: int, seconds: float, read) -> None:
    group = tenant_group(tenant_id)
    # The default prefix, as the live sockets' channels have: channels_redis reads all of a
    # process's channels through one lock and one Redis key per prefix, and a receiver
    # holding the lock pops only its own key. A "wait." channel and a socket each held up
    # the other's pushes until the waiter's recheck (tests/test_api_wait.py).
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    try:
        deadline = time.monotonic() + seconds
        check = True
        while True:
            if check and await sync_to_async(read)(request_id) not in WAITING_STATES:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                message = await asyncio.wait_for(
                    layer.receive(channel), timeout=min(left, RECHECK_SECONDS)
                )
                check = _concerns(message, request_id)
            except TimeoutError:
                check = True
    finally:
        await layer.group_discard(group, channel)


def wait_while_waiting(req: GpuRequest, seconds: float) -> None:
    """Return once ``req`` is no longer pending or approved, or after ``seconds``."""
    if seconds <= 0 or req.state not in WAITING_STATES:
        return
    seconds = min(seconds, MAX_WAIT_SECONDS)
    layer = get_channel_layer()
    if layer is None:  # no channel layer configured: read the row every RECHECK_SECONDS
        deadline = time.monotonic() + seconds
        while _state(req.pk) in WAITING_STATES and time.monotonic() < deadline:
            time.sleep(min(RECHECK_SECONDS, max(0.0, deadline - time.monotonic())))
        return
    async_to_sync(_wait)(layer, req.pk, req.tenant_id, seconds, _state)
