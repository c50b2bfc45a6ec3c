"""Agent URLs, token hints and the agents' own error texts are for node managers only.

Members read the fleet: they see that a node is offline or that its agent has a problem
(a translated, generic label), never where the agent lives, which token it takes or what
it said. The API, the node pages, the node list and the live websocket pushes agree.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.urls import reverse

from agents.models import Node
from telemetry import live
from tests import clients
from tests.factories import NodeFactory, UserFactory
from tests.test_fleet_consumer import _connect, _headers

pytestmark = pytest.mark.django_db

SECRET_ERROR = "HTTP 500: internal-hostname-db7.corp secret body"


@pytest.fixture
def node() -> Node:
    return NodeFactory(
        name="gpu-err", agent_url="http://10.77.0.1:9400", agent_token="tok-0123456789-ABCD",
        last_error=SECRET_ERROR,
    )  # fmt: skip


@pytest.fixture
def viewer():
    """Granted only Django's view permission on nodes: sees the details, changes nothing."""
    return UserFactory(username="victor", permissions=["agents.view_node"])


def _secret_bits(node: Node) -> list[str]:
    return ["10.77.0.1", "…ABCD", "internal-hostname", node.agent_token]


def _page(user, url: str) -> str:
    client = clients.page(user)
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize("name", ["bob", "dave"])
def test_members_see_no_agent_details_on_the_node_page(request, name, node):
    body = _page(request.getfixturevalue(name), reverse("telemetry:node", args=[node.pk]))
    assert not [bit for bit in _secret_bits(node) if bit in body]
    assert "Agent error" in body


@pytest.mark.parametrize("name", ["alice", "carol", "viewer"])
def test_node_managers_see_the_agents_error_on_the_node_page(request, name, node):
    body = _page(request.getfixturevalue(name), reverse("telemetry:node", args=[node.pk]))
    assert "internal-hostname-db7.corp" in body


def test_members_see_no_agent_errors_on_the_fleet_page(bob, carol, node):
    body = _page(bob, reverse("telemetry:dashboard"))
    assert not [bit for bit in _secret_bits(node) if bit in body]
    assert "agent-errors" not in body
    assert "internal-hostname-db7.corp" in _page(carol, reverse("telemetry:dashboard"))


def test_a_viewer_reads_the_node_list_without_write_actions(viewer, node):
    body = _page(viewer, reverse("agents:node_list"))
    assert "http://10.77.0.1:9400" in body and "…ABCD" in body
    assert reverse("agents:node_add") not in body
    assert reverse("agents:node_edit", args=[node.pk]) not in body


def test_the_api_shows_agent_details_to_a_viewer(viewer, node):
    client = clients.api(viewer)
    data = client.get(f"/api/v1/nodes/{node.pk}/").json()
    assert (data["agent_url"], data["token_hint"], data["last_error"]) == (
        "http://10.77.0.1:9400", "…ABCD", SECRET_ERROR
    )  # fmt: skip


# --- websockets -------------------------------------------------------------------------


def _socket_messages(user, path: str, push=None, count: int = 1) -> list[dict]:
    """What a socket of ``user`` receives: the messages on connect, then after ``push()``."""
    cookie = clients.cookie_header(user)

    async def run() -> list[dict]:
        communicator, connected, _ = await _connect(_headers(cookie), path)
        assert connected
        received = []
        while not await communicator.receive_nothing(timeout=0.3):
            received.append(await communicator.receive_json_from(timeout=5))
        if push is not None:
            from channels.db import database_sync_to_async

            await database_sync_to_async(push)()
            while not await communicator.receive_nothing(timeout=0.5):
                received.append(await communicator.receive_json_from(timeout=5))
        await communicator.disconnect()
        return received

    return async_to_sync(run)()


@pytest.mark.django_db(transaction=True)
def test_fleet_pushes_carry_agent_errors_only_to_node_managers(bob, carol):
    node = NodeFactory(name="gpu-err", last_error=SECRET_ERROR)
    push = lambda: live.publish_nodes([node.pk])  # noqa: E731
    for user, sees in ((bob, False), (carol, True)):
        live.cache.clear()
        messages = _socket_messages(user, "/ws/fleet/", push)
        text = repr(messages)
        assert ("internal-hostname-db7.corp" in text) is sees, (user, messages)
        tiles = [m for m in messages if m["type"] == "fleet.nodes"]
        assert len(tiles) == 2 and tiles[0]["nodes"][0]["agent_error"] is True


@pytest.mark.django_db(transaction=True)
def test_node_pushes_carry_agent_errors_only_to_node_managers(bob, carol):
    node = NodeFactory(name="gpu-err", last_error=SECRET_ERROR)
    push = lambda: live.publish_nodes([node.pk])  # noqa: E731
    for user, sees in ((bob, False), (carol, True)):
        messages = _socket_messages(user, f"/ws/nodes/{node.pk}/", push)
        text = repr(messages)
        assert ("internal-hostname-db7.corp" in text) is sees, (user, messages)
        details = [m for m in messages if m["type"] == "node.detail"]
        assert len(details) == 2 and details[-1]["node"]["agent_error"] is True
