"""Every node change a person makes is in the audit log, whichever way it was made: the
registration pages, the API (one node, a CSV or YAML import), the Django admin. Each entry
names who and from where, holds the node before and after, and never its agent token."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agents import registration
from agents.models import Node
from audit.interface import AuditEntry
from tests import clients

pytestmark = pytest.mark.django_db

TOKEN = "tok-0123456789-abcdef-WXYZ"
NEW_TOKEN = "tok-9876543210-fedcba-QRST"
ADDRESS = "203.0.113.9"


@pytest.fixture
def node() -> Node:
    # Made directly, so that the log starts empty in each test.
    return Node.objects.create(
        name="gpu-01", agent_url="http://10.0.0.1:9400", agent_token=TOKEN, labels={"rack": "r1"}
    )


def _entries(action: str | None = None) -> list[AuditEntry]:
    found = AuditEntry.objects.filter(target_type="agents.node").order_by("id")
    return list(found.filter(action=action) if action else found)


def _assert_no_token(entry: AuditEntry) -> None:
    stored = json.dumps(AuditEntry.objects.filter(pk=entry.pk).values().get(), default=str)
    assert TOKEN not in stored and NEW_TOKEN not in stored and "encrypted" not in stored


def _assert_by(entry: AuditEntry, user) -> None:
    assert (entry.actor_id, entry.actor_name, entry.address) == (
        user.pk, user.get_username(), ADDRESS
    )  # fmt: skip


# --- the registration pages ---------------------------------------------------------------


def test_adding_a_node_on_the_page_is_recorded_with_its_state_and_token_hint(carol):
    form = {"name": "gpu-09", "agent_url": "http://10.0.0.9:9400", "token": TOKEN,
            "labels": "rack=r9", "state": "offline"}  # fmt: skip
    assert (
        clients.page(carol, REMOTE_ADDR=ADDRESS).post(reverse("agents:node_add"), form).status_code
        == 302
    )
    [entry] = _entries()
    node = Node.objects.get(name="gpu-09")
    assert (entry.action, entry.target_id, entry.target_repr) == (
        "node.created", str(node.pk), "gpu-09"
    )  # fmt: skip
    _assert_by(entry, carol)
    assert entry.before is None
    assert entry.after == {
        "name": "gpu-09", "hostname": "", "source": "agent", "agent_url": "http://10.0.0.9:9400",
        "agent_token_hint": "…WXYZ", "labels": {"rack": "r9"}, "state": "offline",
    }  # fmt: skip
    _assert_no_token(entry)


def test_draining_a_node_on_the_page_is_recorded_before_and_after(carol, node):
    form = {"name": "gpu-01", "agent_url": "http://10.0.0.1:9400", "token": "",
            "labels": "rack=r1", "state": "draining"}  # fmt: skip
    response = clients.page(carol, REMOTE_ADDR=ADDRESS).post(
        reverse("agents:node_edit", args=[node.pk]), form
    )
    assert response.status_code == 302
    [entry] = _entries("node.updated")
    _assert_by(entry, carol)
    assert (entry.before["state"], entry.after["state"]) == ("offline", "draining")
    assert entry.before["labels"] == entry.after["labels"] == {"rack": "r1"}
    _assert_no_token(entry)


def test_a_new_token_is_recorded_as_replaced_without_the_token(carol, node):
    form = {"name": "gpu-01", "agent_url": "http://10.0.0.1:9400", "token": NEW_TOKEN,
            "labels": "rack=r1", "state": "offline"}  # fmt: skip
    clients.page(carol, REMOTE_ADDR=ADDRESS).post(reverse("agents:node_edit", args=[node.pk]), form)
    [entry] = _entries("node.updated")
    assert (entry.before["agent_token_hint"], entry.after["agent_token_hint"]) == ("…WXYZ", "…QRST")
    assert entry.message == "agent token replaced"
    _assert_no_token(entry)


def test_saving_a_node_unchanged_records_nothing(carol, node):
    form = {"name": "gpu-01", "agent_url": "http://10.0.0.1:9400", "token": "",
            "labels": "rack=r1", "state": "offline"}  # fmt: skip
    clients.page(carol, REMOTE_ADDR=ADDRESS).post(reverse("agents:node_edit", args=[node.pk]), form)
    assert _entries("node.updated") == []


def test_a_refused_change_records_nothing(carol, node):
    form = {"name": "gpu-01", "agent_url": "ftp://nowhere", "token": "", "labels": "",
            "state": "offline"}  # fmt: skip
    response = clients.page(carol, REMOTE_ADDR=ADDRESS).post(
        reverse("agents:node_edit", args=[node.pk]), form
    )
    assert response.status_code == 200
    assert _entries("node.updated") == []


def test_a_page_import_records_each_node_it_adds_and_changes(carol, node):
    text = (
        "name,agent_url,token,labels,state\n"
        "gpu-01,http://10.0.0.1:9400,,rack=r5,maintenance\n"
        "gpu-a,http://10.0.1.1:9400,t-a-secret-long,rack=r1,\n"
    )
    url = reverse("agents:node_import")
    client = clients.page(carol, REMOTE_ADDR=ADDRESS)
    form = {"content": text, "format": "csv", "update": "on"}
    client.post(url, form | {"action": "check"})
    assert _entries() == []  # a dry run writes nothing, to the log neither
    assert client.post(url, form | {"action": "import"}).status_code == 302
    created, updated = _entries("node.created"), _entries("node.updated")
    assert [e.target_repr for e in created] == ["gpu-a"]
    assert [e.target_repr for e in updated] == ["gpu-01"]
    assert created[0].after["agent_token_hint"] == "…long"
    assert updated[0].before["labels"] == {"rack": "r1"}
    assert (updated[0].after["labels"], updated[0].after["state"]) == (
        {"rack": "r5"},
        "maintenance",
    )
    for entry in created + updated:
        _assert_by(entry, carol)
        assert entry.message == "import"
        _assert_no_token(entry)
        assert "t-a-secret-long" not in json.dumps(entry.after)


def test_an_import_with_a_bad_row_records_nothing(carol, node):
    text = "name,agent_url\ngpu-b,http://10.0.3.1:9400\ngpu-01,http://10.0.3.2:9400\n"
    url = reverse("agents:node_import")
    response = clients.page(carol, REMOTE_ADDR=ADDRESS).post(
        url, {"content": text, "format": "csv", "action": "import"}
    )
    assert response.status_code == 200 and not response.context["report"].ok
    assert _entries() == []


# --- the API ------------------------------------------------------------------------------


def test_the_api_records_create_update_and_delete(carol):
    client = clients.api(carol, REMOTE_ADDR=ADDRESS)
    body = {"name": "gpu-api", "agent_url": "http://10.0.4.1:9400", "token": TOKEN}
    created = client.post("/api/v1/nodes/", body, format="json")
    assert created.status_code == 201
    pk = created.json()["id"]
    patch = client.patch(f"/api/v1/nodes/{pk}/", {"state": "maintenance"}, format="json")
    assert patch.status_code == 200
    assert client.delete(f"/api/v1/nodes/{pk}/").status_code == 204
    entries = _entries()
    assert [e.action for e in entries] == ["node.created", "node.updated", "node.deleted"]
    assert {e.target_id for e in entries} == {str(pk)}
    assert entries[1].before["state"] == "offline" and entries[1].after["state"] == "maintenance"
    assert entries[2].before["name"] == "gpu-api" and entries[2].after is None
    for entry in entries:
        _assert_by(entry, carol)
        _assert_no_token(entry)


def test_a_refused_api_write_records_nothing(bob, node):
    client = clients.api(bob, REMOTE_ADDR=ADDRESS)
    assert client.patch(f"/api/v1/nodes/{node.pk}/", {"state": "draining"}).status_code == 403
    assert client.delete(f"/api/v1/nodes/{node.pk}/").status_code == 403
    assert _entries() == []


def test_a_yaml_import_through_the_api_records_each_node(carol, node):
    yaml = (
        "- name: gpu-y\n  agent_url: http://10.0.2.1:9400\n  token: t-y-secret-long\n"
        "- name: gpu-01\n  state: draining\n"
    )
    response = clients.api(carol, REMOTE_ADDR=ADDRESS).post(
        "/api/v1/nodes/import/?update=true", yaml, content_type="application/yaml"
    )
    assert response.status_code == 201, response.content
    assert [e.target_repr for e in _entries("node.created")] == ["gpu-y"]
    [updated] = _entries("node.updated")
    assert (updated.target_repr, updated.after["state"]) == ("gpu-01", "draining")
    for entry in _entries():
        _assert_by(entry, carol)


def test_an_api_dry_run_records_nothing(carol):
    csv = "name,agent_url\ngpu-d,http://10.0.5.1:9400\n"
    response = clients.api(carol, REMOTE_ADDR=ADDRESS).post(
        "/api/v1/nodes/import/?dry_run=1", csv, content_type="text/csv"
    )
    assert response.status_code == 200 and response.json()["created"] == ["gpu-d"]
    assert _entries() == []


# --- the Django admin ---------------------------------------------------------------------


def _admin_form(**values) -> dict:
    form = {"name": "gpu-adm", "source": "agent", "agent_url": "http://10.0.6.1:9400",
            "agent_token": "", "labels": "{}", "state": "offline",
            "gpus-TOTAL_FORMS": "0", "gpus-INITIAL_FORMS": "0"}  # fmt: skip
    return form | values


def test_the_admin_records_add_change_and_delete(alice):
    client = clients.page(alice, REMOTE_ADDR=ADDRESS)
    response = client.post("/admin/agents/node/add/", _admin_form(agent_token=TOKEN))
    assert response.status_code == 302, response.content
    node = Node.objects.get(name="gpu-adm")
    url = f"/admin/agents/node/{node.pk}/"
    response = client.post(f"{url}change/", _admin_form(state="draining", labels='{"a": "b"}'))
    assert response.status_code == 302, response.content
    assert client.post(f"{url}delete/", {"post": "yes"}).status_code == 302
    entries = _entries()
    assert [e.action for e in entries] == ["node.created", "node.updated", "node.deleted"]
    assert entries[0].after["agent_token_hint"] == "…WXYZ"
    assert entries[1].before["state"] == "offline" and entries[1].after["state"] == "draining"
    assert entries[1].after["labels"] == {"a": "b"} and entries[1].message == ""
    assert entries[2].before["state"] == "draining"
    for entry in entries:
        _assert_by(entry, alice)
        _assert_no_token(entry)


def test_the_admin_bulk_delete_records_each_node(alice, node):
    other = Node.objects.create(name="gpu-02", agent_url="http://10.0.0.2:9400")
    response = clients.page(alice, REMOTE_ADDR=ADDRESS).post(
        "/admin/agents/node/",
        {"action": "delete_selected", "_selected_action": [node.pk, other.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert not Node.objects.exists()
    deleted = _entries("node.deleted")
    assert sorted(e.target_repr for e in deleted) == ["gpu-01", "gpu-02"]
    for entry in deleted:
        _assert_by(entry, alice)


def test_changes_without_a_person_name_no_actor(db):
    # The registration functions called from code (a command, the demo) name no one.
    registration.register_node(name="gpu-code", agent_url="http://10.0.7.1:9400")
    [entry] = _entries("node.created")
    assert entry.actor_id is None and entry.actor_name == "" and entry.address is None
