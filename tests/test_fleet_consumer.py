"""The dashboard's websocket through the real ASGI application and Redis channel layer."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from portal.asgi import application
from telemetry import live
from telemetry.live import FLEET_GROUP, node_group
from tests import clients
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _headers(cookie: tuple[bytes, bytes] | None = None) -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    if cookie:
        headers.append(cookie)
    return headers


async def _connect(headers, path="/ws/fleet/"):
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=5)
    return communicator, connected, code


def test_anonymous_socket_is_closed_with_the_login_code():
    async def run():
        communicator, connected, code = await _connect(_headers())
        await communicator.disconnect()
        return connected, code

    assert async_to_sync(run)() == (False, 4401)


def test_foreign_origin_is_refused(bob):
    headers = [
        (b"origin", b"http://evil.example"),
        (b"host", b"localhost"),
        clients.cookie_header(bob),
    ]

    async def run():
        communicator, connected, _ = await _connect(headers)
        await communicator.disconnect()
        return connected

    assert async_to_sync(run)() is False


def test_logged_in_socket_gets_the_fleet_then_pushed_updates(bob):
    NodeFactory(name="gpu-a")
    cookie = clients.cookie_header(bob)

    async def run():
        communicator, connected, _ = await _connect(_headers(cookie))
        assert connected
        first = await communicator.receive_json_from(timeout=5)
        await get_channel_layer().group_send(
            FLEET_GROUP, live.encode("fleet.nodes", "nodes", [{"id": 1, "name": "x"}])
        )
        second = await communicator.receive_json_from(timeout=5)
        # Whatever the browser sends is ignored, and the socket stays open.
        await communicator.send_json_to({"type": "anything"})
        assert await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()
        return first, second

    first, second = async_to_sync(run)()
    assert first["type"] == "fleet.nodes"
    assert [n["name"] for n in first["nodes"]] == ["gpu-a"]
    assert second["type"] == "fleet.nodes" and second["nodes"] == [{"id": 1, "name": "x"}]
    assert second["sent_at"] > 0


def test_node_socket_sends_the_cards_and_marks_the_node_watched(bob, store):
    node = NodeFactory(name="gpu-a")
    cookie = clients.cookie_header(bob)

    async def run():
        communicator, connected, _ = await _connect(_headers(cookie), f"/ws/nodes/{node.pk}/")
        assert connected
        first = await communicator.receive_json_from(timeout=5)
        await get_channel_layer().group_send(
            node_group(node.pk), live.encode("node.detail", "node", {"id": node.pk, "gpus": []})
        )
        second = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return first, second

    first, second = async_to_sync(run)()
    assert first["type"] == "node.detail" and first["node"]["name"] == "gpu-a"
    assert second["node"] == {"id": node.pk, "gpus": []}
    assert live.watched([node.pk]) == [node.pk]


def test_socket_for_a_missing_node_is_closed_with_not_found(bob):
    cookie = clients.cookie_header(bob)

    async def run():
        communicator, connected, code = await _connect(_headers(cookie), "/ws/nodes/999999/")
        await communicator.disconnect()
        return connected, code

    assert async_to_sync(run)() == (False, 4404)
