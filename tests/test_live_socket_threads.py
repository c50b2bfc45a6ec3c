"""A dashboard's socket does its synchronous work in a thread of its own
(portal.websocket.SyncWorkPerSocket), through the real ASGI application and the Redis
channel layer.

Before, asgiref ran the thread-sensitive calls of every socket of a daphne process (the
session and user lookup, the first picture, a node page's watch) one after another in
its one shared thread: with that thread held up, a connecting dashboard waited past
daphne's handshake timeout and was dropped unaccepted, a client that never got an update
(bench/live: 3 of 200 in a quiet run, most of them while the database was busy).
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from asgiref.sync import SyncToAsync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from portal.asgi import application
from telemetry import live
from tests import clients
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_dashboard_connects_and_hears_pushes_while_the_shared_sync_thread_is_held(bob):
    NodeFactory(name="gpu-a")
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        clients.cookie_header(bob),
    ]
    release = threading.Event()
    # The thread asgiref gives thread-sensitive calls that no context claims, held here
    # as by another socket's slow lookup. 30 s: never reached, released below.
    held = SyncToAsync.single_thread_executor.submit(release.wait, 30)

    async def run():
        communicator = WebsocketCommunicator(application, "/ws/fleet/", headers=headers)
        try:
            connected, _ = await communicator.connect(timeout=10)
            assert connected
            first = await communicator.receive_json_from(timeout=10)
            push = live.encode("fleet.nodes", "nodes", [{"id": 1, "name": "x"}])
            await get_channel_layer().group_send(live.FLEET_GROUP, push)
            second = await communicator.receive_json_from(timeout=10)
        finally:
            await communicator.disconnect()
        return first, second

    try:
        # asyncio.run, not async_to_sync: no parent sync thread for the calls to fall back
        # on, as in daphne.
        first, second = asyncio.run(run())
    finally:
        release.set()
        held.result()
    assert [n["name"] for n in first["nodes"]] == ["gpu-a"]
    assert second["nodes"] == [{"id": 1, "name": "x"}]
