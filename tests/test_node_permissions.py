"""Who may register nodes, on the pages and through the API's extra actions.

The same permissions everywhere: agents.add_node, change_node and delete_node, as the admin
checks them. alice (superuser) and carol (an operator granted them) are allowed; bob (a
member) and dave (staff without them) are refused; the CRUD endpoints are covered by
tests/test_api_endpoints.py.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import Node
from tests import clients
from tests.factories import NodeFactory, UserFactory

pytestmark = pytest.mark.django_db

CSV = "name,agent_url,token\ngpu-csv,http://10.9.0.1:9400,t-csv-secret\n"
UNREACHABLE = "http://127.0.0.1:1"  # connection refused at once: the test saves nothing


@pytest.fixture
def node() -> Node:
    return NodeFactory(name="gpu-01")


@pytest.fixture
def adder(db):
    """An operator who may add nodes but not change or delete them."""
    return UserFactory(username="ada", permissions=["agents.add_node"])


def _pages(node: Node) -> list[str]:
    return [
        reverse("agents:node_list"),
        reverse("agents:node_add"),
        reverse("agents:node_edit", args=[node.pk]),
        reverse("agents:node_import"),
    ]


@pytest.mark.parametrize("actor", ["alice", "carol"], indirect=True)
def test_admins_and_operators_open_every_registration_page(client, actor, node):
    client.force_login(actor)
    for url in _pages(node):
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("actor", ["bob", "dave"], indirect=True)
def test_members_and_staff_without_the_permissions_are_refused_every_page(client, actor, node):
    client.force_login(actor)
    for url in _pages(node):
        assert client.get(url).status_code == 403, url
        assert client.post(url, {"name": "x", "agent_url": "http://x:1"}).status_code == 403
    response = client.post(reverse("agents:node_test_connection"), {"agent_url": UNREACHABLE})
    assert response.status_code == 403
    assert list(Node.objects.values_list("name", flat=True)) == ["gpu-01"]


def test_an_operator_adds_edits_and_imports_nodes_on_the_pages(client, carol, node):
    client.force_login(carol)
    form = {"name": "gpu-02", "agent_url": "http://gpu-02:9400", "token": "t-2", "state": "offline"}
    assert client.post(reverse("agents:node_add"), form).status_code == 302
    form = {"name": "gpu-01", "agent_url": node.agent_url, "token": "", "state": "maintenance"}
    assert client.post(reverse("agents:node_edit", args=[node.pk]), form).status_code == 302
    form = {"content": CSV, "format": "csv", "update": "on", "action": "import"}
    assert client.post(reverse("agents:node_import"), form).status_code == 302
    assert Node.objects.get(name="gpu-01").state == "maintenance"
    assert set(Node.objects.values_list("name", flat=True)) == {"gpu-01", "gpu-02", "gpu-csv"}


def test_who_may_only_add_gets_no_edit_links_no_update_box_and_no_stored_token(client, adder, node):
    client.force_login(adder)
    listing = client.get(reverse("agents:node_list")).content.decode()
    assert reverse("agents:node_add") in listing
    assert reverse("agents:node_edit", args=[node.pk]) not in listing
    assert client.get(reverse("agents:node_edit", args=[node.pk])).status_code == 403
    page = client.get(reverse("agents:node_import")).content.decode()
    assert 'name="update"' not in page
    # A ticked box sent anyway is not an update: the registered name stays an error.
    text = "name,agent_url,token\ngpu-01,http://10.9.0.2:9400,t\n"
    form = {"content": text, "format": "csv", "update": "on", "action": "import"}
    response = client.post(reverse("agents:node_import"), form)
    assert [(e.row, e.field) for e in response.context["report"].errors] == [(1, "name")]
    # The edit page's test uses the stored token: only for those who may change the node.
    url = reverse("agents:node_test_connection")
    response = client.post(url, {"agent_url": UNREACHABLE, "token": "", "node": node.pk})
    assert response.status_code == 403
    response = client.post(url, {"agent_url": UNREACHABLE, "token": "typed"})
    assert response.status_code == 200 and 'data-ok="false"' in response.content.decode()


@pytest.mark.parametrize(("actor", "shown"), [("carol", True), ("dave", False)], indirect=["actor"])
def test_the_fleet_page_links_to_node_management_by_permission_not_staff(client, actor, shown):
    client.force_login(actor)
    body = client.get(reverse("telemetry:dashboard")).content.decode()
    assert (f'href="{reverse("agents:node_list")}"' in body) is shown
    assert (f'href="{reverse("agents:node_add")}"' in body) is shown


# --- the API's extra actions --------------------------------------------------------------


@pytest.mark.parametrize(
    ("actor", "allowed"),
    [("alice", True), ("carol", True), ("bob", False), ("dave", False)],
    indirect=["actor"],
)
def test_the_api_import_and_connection_test_take_the_node_permissions(actor, allowed):
    client = clients.api(actor)
    response = client.post("/api/v1/nodes/import/", CSV, content_type="text/csv")
    assert response.status_code == (201 if allowed else 403), response.content
    assert Node.objects.filter(name="gpu-csv").exists() is allowed
    body = {"agent_url": UNREACHABLE, "token": "t"}
    response = client.post("/api/v1/nodes/test-connection/", body, format="json")
    assert response.status_code == (200 if allowed else 403), response.content


def test_an_api_import_that_updates_needs_the_change_permission(adder, node):
    client = clients.api(adder)
    moved = "name,state\ngpu-01,draining\n"
    response = client.post("/api/v1/nodes/import/?update=1", moved, content_type="text/csv")
    assert response.status_code == 403
    node.refresh_from_db()
    assert node.state == "offline"
    # Adding alone is theirs.
    response = client.post("/api/v1/nodes/import/", CSV, content_type="text/csv")
    assert response.status_code == 201
    assert client.patch(f"/api/v1/nodes/{node.pk}/", {"state": "draining"}).status_code == 403
