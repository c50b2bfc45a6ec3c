"""A node's stored token only ever goes to its stored URL.

Moving a node to a new address takes its token again, in the pages, the API, the admin
and an update import; a connection test with the stored token only tries the stored URL.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents import node_files, registration
from agents.models import Node
from tests import clients
from tests.api import error_fields
from tests.recorder import recorder_fixture  # noqa: F401 (the recorder fixture)

pytestmark = pytest.mark.django_db

TOKEN = "tok-0123456789-stored-WXYZ"
URL = "http://10.0.0.1:9400"


@pytest.fixture
def node() -> Node:
    return registration.register_node(name="gpu-01", agent_url=URL, token=TOKEN)


def _form(node: Node, **changes: str) -> dict[str, str]:
    return {"name": node.name, "agent_url": node.agent_url, "token": "", "labels": "",
            "state": node.state} | changes  # fmt: skip


def _unchanged(node: Node) -> bool:
    stored = Node.objects.get(pk=node.pk)
    return stored.agent_url == node.agent_url and stored.agent_token == TOKEN


# --- pages ------------------------------------------------------------------------------


def test_an_edit_that_moves_a_node_without_its_token_is_refused(client, carol, node, recorder):
    client.force_login(carol)
    response = client.post(
        reverse("agents:node_edit", args=[node.pk]), _form(node, agent_url=recorder.url)
    )
    assert response.status_code == 200
    assert "token" in response.context["form"].errors
    assert _unchanged(node)


def test_an_edit_that_moves_a_node_with_its_token_is_saved(client, carol, node, recorder):
    client.force_login(carol)
    response = client.post(
        reverse("agents:node_edit", args=[node.pk]),
        _form(node, agent_url=recorder.url, token="tok-new-0123456789"),
    )
    assert response.status_code == 302
    stored = Node.objects.get(pk=node.pk)
    assert stored.agent_url == recorder.url and stored.agent_token == "tok-new-0123456789"


def test_a_node_without_a_token_moves_without_one(client, carol, recorder):
    open_node = registration.register_node(name="gpu-open", agent_url=URL)
    client.force_login(carol)
    response = client.post(
        reverse("agents:node_edit", args=[open_node.pk]), _form(open_node, agent_url=recorder.url)
    )
    assert response.status_code == 302
    assert Node.objects.get(pk=open_node.pk).agent_url == recorder.url


def test_a_connection_test_with_the_stored_token_never_goes_to_a_new_url(
    client, carol, node, recorder
):
    client.force_login(carol)
    response = client.post(
        reverse("agents:node_test_connection"),
        {"agent_url": recorder.url, "token": "", "node": node.pk},
    )
    body = response.content.decode()
    assert response.status_code == 200 and 'data-ok="false"' in body
    assert "token" in body.lower()
    assert recorder.requests == []


def test_a_connection_test_with_the_stored_token_goes_to_the_stored_url(client, carol, recorder):
    here = registration.register_node(name="gpu-here", agent_url=recorder.url, token=TOKEN)
    client.force_login(carol)
    client.post(
        reverse("agents:node_test_connection"),
        {"agent_url": recorder.url + "/", "token": "", "node": here.pk},
    )
    assert recorder.authorizations() == [f"Bearer {TOKEN}"]


def test_a_connection_test_with_a_typed_token_may_go_anywhere(client, carol, node, recorder):
    client.force_login(carol)
    client.post(
        reverse("agents:node_test_connection"),
        {"agent_url": recorder.url, "token": "typed-token-0123", "node": node.pk},
    )
    assert recorder.authorizations() == ["Bearer typed-token-0123"]


# --- API --------------------------------------------------------------------------------


def test_an_api_patch_of_the_url_without_the_token_is_a_400(carol, node, recorder):
    client = clients.api(carol)
    url = f"/api/v1/nodes/{node.pk}/"
    response = client.patch(url, {"agent_url": recorder.url}, format="json")
    assert response.status_code == 400 and set(error_fields(response)) == {"token"}
    assert _unchanged(node)
    response = client.patch(url, {"agent_url": recorder.url, "token": ""}, format="json")
    assert response.status_code == 400 and _unchanged(node)
    response = client.put(
        url, {"name": node.name, "agent_url": recorder.url, "labels": {}}, format="json"
    )
    assert response.status_code == 400 and _unchanged(node)
    response = client.patch(
        url, {"agent_url": recorder.url, "token": "tok-new-0123456789"}, format="json"
    )
    assert response.status_code == 200
    assert Node.objects.get(pk=node.pk).agent_url == recorder.url


def test_an_api_patch_that_keeps_the_url_needs_no_token(carol, node):
    client = clients.api(carol)
    response = client.patch(
        f"/api/v1/nodes/{node.pk}/", {"agent_url": URL + "/", "state": "draining"}, format="json"
    )
    assert response.status_code == 200
    assert Node.objects.get(pk=node.pk).state == "draining" and _unchanged(node)


def test_the_service_refuses_a_move_without_the_token(node):
    with pytest.raises(ValidationError) as refused:
        registration.update_node(node.pk, agent_url="http://10.9.9.9:9400")
    assert set(refused.value.message_dict) == {"token"}
    assert _unchanged(node)


# --- import and admin -------------------------------------------------------------------


def test_an_update_import_that_moves_a_node_without_its_token_writes_nothing(node):
    rows = node_files.parse(
        "name,agent_url\ngpu-01,http://10.9.9.9:9400\ngpu-02,http://10.0.0.2:9400\n",
        "csv",
        update=True,
    )
    report = registration.import_nodes(rows, update=True)
    assert [(e.row, e.field) for e in report.errors] == [(1, "token")]
    assert _unchanged(node) and Node.objects.count() == 1


def test_an_update_import_that_moves_a_node_with_its_token_applies(node):
    rows = node_files.parse(
        "name,agent_url,token\ngpu-01,http://10.9.9.9:9400,tok-new-0123456789\n",
        "csv",
        update=True,
    )
    report = registration.import_nodes(rows, update=True)
    assert report.ok and report.updated == ["gpu-01"]
    assert Node.objects.get(pk=node.pk).agent_url == "http://10.9.9.9:9400"


def test_the_admin_refuses_a_move_without_the_token(client, alice, node):
    client.force_login(alice)
    response = client.post(
        reverse("admin:agents_node_change", args=[node.pk]),
        {"name": node.name, "source": "agent", "agent_url": "http://10.9.9.9:9400",
         "agent_token": "", "labels": "{}", "state": "offline",
         "gpus-TOTAL_FORMS": "0", "gpus-INITIAL_FORMS": "0"},
    )  # fmt: skip
    assert response.status_code == 200  # the form again, with the error
    assert _unchanged(node)
