"""Node registration pages and API: admins write, members read, tokens never come back."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents import registration
from agents.models import Node
from tests import clients
from tests.api import error_fields

pytestmark = pytest.mark.django_db

TOKEN = "tok-0123456789-abcdef-WXYZ"
CSV = "name,agent_url,token,labels\ngpu-a,http://10.0.1.1:9400,t-a-secret,rack=r1\n"
YAML = "- name: gpu-y\n  agent_url: http://10.0.2.1:9400\n  token: t-y-secret\n"


@pytest.fixture
def node() -> Node:
    return registration.register_node(
        name="gpu-01", agent_url="http://10.0.0.1:9400", token=TOKEN, labels={"rack": "r1"}
    )


# --- pages ------------------------------------------------------------------------------


def test_an_admin_adds_a_node_and_the_list_shows_only_its_token_hint(client, alice):
    client.force_login(alice)
    response = client.post(
        reverse("agents:node_add"),
        {"name": "gpu-09", "agent_url": "http://gpu-09:9400", "token": TOKEN,
         "labels": "rack=r9\nzone=b", "state": "offline"},
    )  # fmt: skip
    assert response.status_code == 302
    node = Node.objects.get(name="gpu-09")
    assert node.agent_token == TOKEN and node.labels == {"rack": "r9", "zone": "b"}
    body = client.get(reverse("agents:node_list")).content.decode()
    assert "gpu-09" in body and "…WXYZ" in body and TOKEN not in body


def test_the_add_form_shows_service_errors_and_saves_nothing(client, alice, node):
    client.force_login(alice)
    response = client.post(
        reverse("agents:node_add"),
        {"name": "gpu-01", "agent_url": "ftp://x", "token": TOKEN, "state": "offline"},
    )
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "name" in errors and "agent_url" in errors
    assert TOKEN not in response.content.decode()
    assert Node.objects.count() == 1


def test_an_admin_edits_a_node_and_an_empty_token_keeps_the_old_one(client, alice, node):
    client.force_login(alice)
    url = reverse("agents:node_edit", args=[node.pk])
    page = client.get(url).content.decode()
    assert "…WXYZ" in page and TOKEN not in page
    response = client.post(
        url,
        {"name": "gpu-01b", "agent_url": "http://10.0.0.1:9400", "token": "",
         "labels": "rack=r2", "state": "maintenance"},
    )  # fmt: skip
    assert response.status_code == 302
    node.refresh_from_db()
    assert (node.name, node.state, node.labels) == ("gpu-01b", "maintenance", {"rack": "r2"})
    assert node.agent_token == TOKEN


def test_an_admin_imports_nodes_and_a_bad_file_shows_row_errors(client, alice):
    client.force_login(alice)
    url = reverse("agents:node_import")
    bad = CSV + "gpu-b,not-a-url,t-b,\n"
    response = client.post(url, {"content": bad, "format": "csv", "action": "import"})
    assert response.status_code == 200
    [error] = response.context["report"].errors
    assert (error.row, error.field) == (2, "agent_url")
    assert "t-a-secret" not in response.content.decode().split("<form")[0]
    assert not Node.objects.exists()
    response = client.post(url, {"content": CSV, "format": "auto", "action": "import"})
    assert response.status_code == 302
    assert Node.objects.get().agent_token == "t-a-secret"


def test_an_admin_reimports_a_file_to_update_existing_nodes(client, alice, node):
    client.force_login(alice)
    url = reverse("agents:node_import")
    text = (
        # A new URL takes the token again (tests/test_token_follows_url.py).
        f"name,agent_url,token,labels\ngpu-01,http://10.0.0.8:9400,{TOKEN},rack=r8\n"
        + CSV[CSV.index("\n") + 1 :]
    )
    page = client.get(url).content.decode()
    assert 'name="update"' in page and "Update nodes that already exist" in page
    # Without the box ticked a registered name is still an error.
    response = client.post(url, {"content": text, "format": "csv", "action": "import"})
    assert [(e.row, e.field) for e in response.context["report"].errors] == [(1, "name")]
    form = {"content": text, "format": "csv", "update": "on"}
    response = client.post(url, form | {"action": "check"})
    assert response.status_code == 200 and response.context["report"].ok
    assert "1 node would be created. 1 node would be updated." in response.content.decode()
    assert not Node.objects.filter(name="gpu-a").exists()
    response = client.post(url, form | {"action": "import"}, follow=True)
    assert "1 node created. 1 node updated." in response.content.decode()
    node.refresh_from_db()
    assert (node.agent_url, node.labels, node.agent_token) == (
        "http://10.0.0.8:9400", {"rack": "r8"}, TOKEN
    )  # fmt: skip
    assert Node.objects.get(name="gpu-a").agent_token == "t-a-secret"
    response = client.post(url, form | {"action": "import"}, follow=True)
    assert "0 nodes created. 0 nodes updated. 2 nodes are unchanged." in response.content.decode()


def test_a_yaml_upload_is_read_by_its_file_name(client, alice):
    from django.core.files.uploadedfile import SimpleUploadedFile

    client.force_login(alice)
    upload = SimpleUploadedFile("nodes.yaml", YAML.encode(), "application/octet-stream")
    response = client.post(
        reverse("agents:node_import"), {"file": upload, "format": "auto", "action": "import"}
    )
    assert response.status_code == 302
    assert Node.objects.get().name == "gpu-y"


def test_the_test_connection_button_uses_the_stored_token_on_an_edit(client, alice, sim_agents):
    agents = sim_agents(1, 2)
    node = registration.register_node(name="sim", agent_url=agents.urls[0], token=agents.token)
    client.force_login(alice)
    url = reverse("agents:node_test_connection")
    response = client.post(url, {"agent_url": agents.urls[0], "token": "", "node": node.pk})
    body = response.content.decode()
    assert response.status_code == 200 and 'data-ok="true"' in body and "2 GPUs" in body
    response = client.post(url, {"agent_url": agents.urls[0], "token": "wrong"})
    assert 'data-ok="false"' in response.content.decode()


@pytest.mark.parametrize("name", ["node_list", "node_add", "node_import"])
def test_members_are_refused_the_registration_pages(client, bob, name):
    client.force_login(bob)
    assert client.get(reverse(f"agents:{name}")).status_code == 403
    assert client.post(reverse(f"agents:{name}"), {"name": "x"}).status_code == 403
    assert not Node.objects.exists()


def test_members_are_refused_the_edit_page_and_the_connection_test(client, bob, node):
    client.force_login(bob)
    assert client.get(reverse("agents:node_edit", args=[node.pk])).status_code == 403
    response = client.post(reverse("agents:node_test_connection"), {"agent_url": "http://x:1"})
    assert response.status_code == 403


def test_anonymous_visitors_are_sent_to_the_login_page(client):
    response = client.get(reverse("agents:node_list"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_the_fleet_page_links_admins_to_node_management(client, alice, bob):
    client.force_login(alice)
    link = f'href="{reverse("agents:node_list")}"'
    assert link in client.get(reverse("telemetry:dashboard")).content.decode()
    client.force_login(bob)
    assert link not in client.get(reverse("telemetry:dashboard")).content.decode()


# --- API --------------------------------------------------------------------------------


def test_staff_create_a_node_by_api_and_get_only_the_token_hint(alice):
    response = clients.api(alice).post(
        "/api/v1/nodes/",
        {"name": "gpu-api", "agent_url": "http://gpu-api:9400", "token": TOKEN,
         "labels": {"rack": "r1"}},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["token_hint"] == "…WXYZ" and "token" not in data and TOKEN not in str(data)
    assert data["gpu_count"] == 0 and data["state"] == "offline"
    assert Node.objects.get(name="gpu-api").agent_token == TOKEN
    listed = clients.api(alice).get("/api/v1/nodes/").json()
    assert TOKEN not in str(listed)


def test_an_invalid_api_write_is_a_400_that_changes_nothing(alice, node):
    client = clients.api(alice)
    response = client.post("/api/v1/nodes/", {"name": "gpu-01", "agent_url": "nope"}, format="json")
    assert response.status_code == 400
    assert set(error_fields(response)) == {"name", "agent_url"}
    response = client.patch(f"/api/v1/nodes/{node.pk}/", {"labels": {"a b": 1}}, format="json")
    assert response.status_code == 400 and "labels" in error_fields(response)
    node.refresh_from_db()
    assert Node.objects.count() == 1 and node.labels == {"rack": "r1"}


def test_staff_patch_and_delete_nodes_by_api(alice, node):
    client = clients.api(alice)
    response = client.patch(f"/api/v1/nodes/{node.pk}/", {"state": "draining"}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "draining"
    node.refresh_from_db()
    assert node.agent_token == TOKEN
    assert client.delete(f"/api/v1/nodes/{node.pk}/").status_code == 204
    assert not Node.objects.exists()


def test_members_read_nodes_but_every_write_is_refused(bob, node):
    client = clients.api(bob)
    assert client.get(f"/api/v1/nodes/{node.pk}/").status_code == 200
    body = {"name": "x", "agent_url": "http://x:1"}
    assert client.post("/api/v1/nodes/", body, format="json").status_code == 403
    assert client.patch(f"/api/v1/nodes/{node.pk}/", body, format="json").status_code == 403
    assert client.delete(f"/api/v1/nodes/{node.pk}/").status_code == 403
    assert client.post("/api/v1/nodes/import/", CSV, content_type="text/csv").status_code == 403
    response = client.post("/api/v1/nodes/test-connection/", body, format="json")
    assert response.status_code == 403
    node.refresh_from_db()
    assert Node.objects.count() == 1 and node.name == "gpu-01"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/api/v1/nodes/"),
        ("post", "/api/v1/nodes/import/"),
        ("post", "/api/v1/nodes/test-connection/"),
    ],
)
def test_anonymous_callers_are_refused_every_write(method, path):
    assert getattr(clients.api(), method)(path, {}, format="json").status_code == 401


def test_staff_import_csv_and_yaml_bodies_by_content_type(alice):
    client = clients.api(alice)
    response = client.post("/api/v1/nodes/import/", CSV, content_type="text/csv")
    assert response.status_code == 201 and response.json()["created"] == ["gpu-a"]
    response = client.post("/api/v1/nodes/import/", YAML, content_type="application/yaml")
    assert response.status_code == 201 and response.json()["created"] == ["gpu-y"]
    assert Node.objects.get(name="gpu-y").agent_token == "t-y-secret"


def test_an_api_import_with_a_bad_row_is_a_400_that_writes_nothing(alice):
    client = clients.api(alice)
    content = CSV + "gpu-b,http://10.0.1.1:9400,t-b,\n"
    response = client.post(
        "/api/v1/nodes/import/", {"format": "csv", "content": content}, format="json"
    )
    assert response.status_code == 400
    assert error_fields(response)["rows"] == [
        {"row": 2, "field": "agent_url", "message": "Same agent URL as row 1."}
    ]
    assert not Node.objects.exists()
    response = client.post("/api/v1/nodes/import/?dry_run=1", CSV, content_type="text/csv")
    assert response.status_code == 200 and response.json()["dry_run"] is True
    assert not Node.objects.exists()


def test_an_api_import_with_update_changes_registered_nodes_and_a_bad_one_is_a_400(alice, node):
    client = clients.api(alice)
    moved = "name,token,state\ngpu-01,rotated-token-7777,draining\n"
    response = client.post("/api/v1/nodes/import/", moved, content_type="text/csv")
    assert response.status_code == 400  # without update, the agent_url column is required
    bad = moved + "gpu-02,t-2,exploded\n"
    response = client.post(
        "/api/v1/nodes/import/", {"format": "csv", "content": bad, "update": True}, format="json"
    )
    assert response.status_code == 400
    assert {(e["row"], e["field"]) for e in error_fields(response)["rows"]} == {
        (2, "agent_url"), (2, "state")
    }  # fmt: skip
    response = client.post("/api/v1/nodes/import/?update=maybe", moved, content_type="text/csv")
    assert response.status_code == 400 and "update" in error_fields(response)
    node.refresh_from_db()
    assert (node.state, node.agent_token) == ("offline", TOKEN) and Node.objects.count() == 1
    response = client.post("/api/v1/nodes/import/?update=1", moved, content_type="text/csv")
    assert response.status_code == 200
    assert response.json() | {"errors": None} == {
        "created": [], "updated": ["gpu-01"], "unchanged": [], "dry_run": False, "errors": None
    }  # fmt: skip
    node.refresh_from_db()
    assert (node.state, node.agent_token) == ("draining", "rotated-token-7777")
    response = client.post(
        "/api/v1/nodes/import/?update=true&dry_run=1", CSV, content_type="text/csv"
    )
    assert response.status_code == 200
    assert (response.json()["created"], response.json()["dry_run"]) == (["gpu-a"], True)
    assert Node.objects.count() == 1


def test_staff_test_a_connection_by_api_without_saving(alice, sim_agents):
    agents = sim_agents(1, 3)
    client = clients.api(alice)
    body = {"agent_url": agents.urls[0], "token": agents.token}
    data = client.post("/api/v1/nodes/test-connection/", body, format="json").json()
    assert data["ok"] is True and data["gpu_count"] == 3
    body["token"] = "wrong"
    data = client.post("/api/v1/nodes/test-connection/", body, format="json").json()
    assert data["ok"] is False and "401" in data["error"]
    response = client.post("/api/v1/nodes/test-connection/", {}, format="json")
    assert response.status_code == 400
    assert not Node.objects.exists()
