"""Node registration: services, encryption at rest, pages and API, against real agents."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from agents import connection_test, node_files, registration
from agents.choices import NodeSource
from agents.models import Node
from portal import crypto
from telemetry import services
from tests import procs

pytestmark = pytest.mark.django_db

TOKEN = "tok-0123456789-abcdef-WXYZ"


def _raw_token_column(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT agent_token_encrypted FROM agents_node WHERE name = %s", [name])
        return cursor.fetchone()[0]


def _register(name: str = "gpu-01", url: str = "http://10.0.0.1:9400", **kw) -> Node:
    return registration.register_node(name=name, agent_url=url, token=TOKEN, **kw)


# --- services ---------------------------------------------------------------------------


def test_a_registered_token_is_encrypted_at_rest_and_only_its_hint_is_kept():
    node = _register(labels="rack=r1; zone=a")
    raw = _raw_token_column("gpu-01")
    assert raw and TOKEN not in raw and "WXYZ" not in raw
    assert Node.objects.get(pk=node.pk).agent_token == TOKEN
    assert node.agent_token_hint == "…WXYZ"
    assert node.labels == {"rack": "r1", "zone": "a"} and node.state == "offline"


def test_a_short_token_gets_no_characters_in_its_hint():
    node = registration.register_node(name="n", agent_url="http://h:1", token="abc")
    assert node.agent_token_hint == "…"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"agent_url": "ftp://10.0.0.1"}, "agent_url"),
        ({"agent_url": "not a url"}, "agent_url"),
        ({"agent_url": "http://gpu01..lab:9400"}, "agent_url"),
        ({"agent_url": "http://" + "a" * 64 + ".lab:9400"}, "agent_url"),
        ({"name": "has space"}, "name"),
        ({"labels": "rack"}, "labels"),
        ({"labels": {"bad key!": "x"}}, "labels"),
        ({"labels": {"rack": {"nested": 1}}}, "labels"),
        ({"state": "exploded"}, "state"),
        ({"token": "two words"}, "token"),
    ],
)
def test_invalid_input_is_refused_and_nothing_is_written(values, field):
    arguments = {"name": "gpu-01", "agent_url": "http://10.0.0.1:9400", "token": TOKEN} | values
    with pytest.raises(ValidationError) as caught:
        registration.register_node(**arguments)
    assert field in caught.value.message_dict
    assert not Node.objects.exists()


def test_a_duplicate_name_or_agent_url_is_refused():
    _register()
    with pytest.raises(ValidationError) as caught:
        _register(url="http://10.0.0.2:9400")
    assert "name" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        _register(name="gpu-02", url="http://10.0.0.1:9400/")
    assert "agent_url" in caught.value.message_dict
    assert Node.objects.count() == 1


def test_an_update_with_an_empty_token_keeps_the_old_one():
    node = _register()
    registration.update_node(node.pk, token="", labels={"rack": "r2"}, state="draining")
    node.refresh_from_db()
    assert node.agent_token == TOKEN and node.labels == {"rack": "r2"}
    assert node.state == "draining"
    registration.update_node(node.pk, token="new-token-0000-9999")
    node.refresh_from_db()
    assert node.agent_token == "new-token-0000-9999" and node.agent_token_hint == "…9999"


def test_import_is_all_or_nothing_and_reports_rows():
    _register(name="existing")
    rows = node_files.parse_csv(
        "name,agent_url,token,labels\n"
        "gpu-a,http://10.0.1.1:9400,t-a,rack=r1\n"
        "gpu-b,http://10.0.1.2:9400,t-b,rack\n"
        "gpu-a,http://10.0.1.3:9400,t-c,\n"
        "existing,http://10.0.1.1:9400,t-d,\n"
    )
    report = registration.import_nodes(rows)
    assert not report.ok and report.created == []
    found = {(e.row, e.field) for e in report.errors}
    assert found == {(2, "labels"), (3, "name"), (4, "name"), (4, "agent_url")}
    assert list(Node.objects.values_list("name", flat=True)) == ["existing"]


def test_csv_and_yaml_describe_the_same_nodes():
    csv_rows = node_files.parse_csv(
        "name, agent_url, token, labels, state\n"
        "gpu-a, http://10.0.1.1:9400, t-a, rack=r1;zone=b, maintenance\n"
    )
    yaml_rows = node_files.parse_yaml(
        "nodes:\n"
        "  - name: gpu-a\n"
        "    agent_url: http://10.0.1.1:9400\n"
        "    token: t-a\n"
        "    labels: {rack: r1, zone: b}\n"
        "    state: maintenance\n"
    )
    report = registration.import_nodes(yaml_rows, dry_run=True)
    assert report.ok and not Node.objects.exists()
    report = registration.import_nodes(csv_rows)
    assert report.created == ["gpu-a"]
    node = Node.objects.get()
    assert (node.labels, node.state, node.agent_token) == ({"rack": "r1", "zone": "b"},
                                                           "maintenance", "t-a")  # fmt: skip


# --- import with update ----------------------------------------------------------------

HEADER = "name,agent_url,token,labels,state\n"


def _import(text: str, **kw) -> registration.ImportReport:
    rows = node_files.parse_csv(text, update=True)
    return registration.import_nodes(rows, update=True, **kw)


def _errors(report: registration.ImportReport) -> set[tuple[int, str]]:
    return {(error.row, error.field) for error in report.errors}


def test_an_update_import_changes_url_token_labels_and_state_and_adds_new_nodes():
    node = _register(labels={"rack": "r1"})
    report = _import(
        HEADER + "gpu-01,http://10.0.9.1:9400/,new-token-0000-9999,rack=r2;zone=b,draining\n"
        "gpu-02,http://10.0.9.2:9400,t-2,,\n"
    )
    assert report.ok, report.errors
    assert (report.created, report.updated, report.unchanged) == (["gpu-02"], ["gpu-01"], [])
    node.refresh_from_db()
    assert (node.agent_url, node.labels, node.state) == (
        "http://10.0.9.1:9400", {"rack": "r2", "zone": "b"}, "draining"
    )  # fmt: skip
    assert node.agent_token == "new-token-0000-9999" and node.agent_token_hint == "…9999"
    assert Node.objects.get(name="gpu-02").agent_token == "t-2"


def test_empty_cells_keep_the_url_token_and_state_but_an_empty_labels_cell_clears_them():
    node = _register(labels={"rack": "r1"}, state="maintenance")
    report = _import(HEADER + "gpu-01,,,,\n")
    assert report.updated == ["gpu-01"]
    node.refresh_from_db()
    assert (node.agent_url, node.agent_token, node.state, node.labels) == (
        "http://10.0.0.1:9400", TOKEN, "maintenance", {}
    )  # fmt: skip
    # Without a labels column (and in YAML, without a labels key) the labels stay.
    registration.update_node(node.pk, labels={"rack": "r1"})
    report = _import("name,state\ngpu-01,online\n")
    node.refresh_from_db()
    assert report.updated == ["gpu-01"] and (node.state, node.labels) == ("online", {"rack": "r1"})
    rows = node_files.parse_yaml("- {name: gpu-01, token: '', labels: null}\n")
    report = registration.import_nodes(rows, update=True)
    node.refresh_from_db()
    assert report.updated == ["gpu-01"] and node.labels == {} and node.agent_token == TOKEN


def test_a_row_with_the_same_values_is_reported_unchanged_and_not_written():
    node = _register(labels={"rack": "r1"})
    before = Node.objects.get(pk=node.pk).updated
    report = _import(HEADER + f"gpu-01,http://10.0.0.1:9400,{TOKEN},rack=r1,offline\n")
    assert (report.created, report.updated, report.unchanged) == ([], [], ["gpu-01"])
    assert Node.objects.get(pk=node.pk).updated == before


def test_a_new_url_or_token_ends_the_back_off_but_a_label_does_not():
    later = timezone.now() + timedelta(seconds=30)
    node = _register()
    Node.objects.filter(pk=node.pk).update(poll_after=later)
    _import("name,labels\ngpu-01,rack=r9\n")
    assert Node.objects.get(pk=node.pk).poll_after == later
    _import(f"name,agent_url,token\ngpu-01,http://10.0.0.1:9400,{TOKEN}\n")  # the same
    assert Node.objects.get(pk=node.pk).poll_after == later
    _import(f"name,agent_url,token\ngpu-01,http://10.0.0.7:9400,{TOKEN}\n")  # moved
    assert Node.objects.get(pk=node.pk).poll_after is None
    Node.objects.filter(pk=node.pk).update(poll_after=later)
    _import("name,agent_url,token\ngpu-01,,rotated-token-1234\n")
    node.refresh_from_db()
    assert node.poll_after is None and node.agent_token == "rotated-token-1234"


def test_an_update_import_refuses_nodes_read_through_prometheus():
    Node.objects.create(name="dcgm-01", source=NodeSource.PROMETHEUS, labels={"a": "b"})
    report = _import(HEADER + "dcgm-01,http://10.0.0.5:9400,,,\n")
    assert _errors(report) == {(1, "name")}
    assert Node.objects.get(name="dcgm-01").agent_url == ""


def test_an_update_import_refuses_a_url_another_node_owns_even_if_that_node_moves():
    _register()
    _register(name="gpu-02", url="http://10.0.0.2:9400")
    report = _import(
        "name,agent_url,token\n"
        f"gpu-02,http://10.0.0.1:9400,{TOKEN}\n"  # gpu-01's
        f"gpu-01,http://10.0.0.3:9400,{TOKEN}\n"  # gpu-01 moves away, in the same file
        "gpu-03,http://10.0.0.3:9400,t-3\n"  # the same URL as row 2
        f"gpu-01,http://10.0.0.4:9400,{TOKEN}\n"  # the same node twice
    )
    assert _errors(report) == {(1, "agent_url"), (3, "agent_url"), (4, "name")}
    assert dict(Node.objects.values_list("name", "agent_url")) == {
        "gpu-01": "http://10.0.0.1:9400", "gpu-02": "http://10.0.0.2:9400"
    }  # fmt: skip


def test_an_update_import_with_one_bad_row_writes_none_of_the_good_ones():
    node = _register(labels={"rack": "r1"})
    report = _import(
        HEADER + "gpu-01,http://10.0.5.1:9400,other-token-5555,rack=r5,draining\n"
        "gpu-02,http://10.0.5.2:9400,t-2,,\n"
        "gpu-03,http://10.0.5.3:9400,t-3,,exploded\n"
    )
    assert _errors(report) == {(3, "state")}
    assert (report.created, report.updated, report.unchanged) == ([], [], [])
    assert list(Node.objects.values_list("name", flat=True)) == ["gpu-01"]
    node.refresh_from_db()
    assert (node.agent_url, node.agent_token, node.labels, node.state) == (
        "http://10.0.0.1:9400", TOKEN, {"rack": "r1"}, "offline"
    )  # fmt: skip


def test_an_update_dry_run_reports_what_it_would_do_and_writes_nothing():
    node = _register()
    _register(name="gpu-02", url="http://10.0.0.2:9400")
    text = (
        HEADER + f"gpu-01,http://10.0.0.9:9400,{TOKEN},,\ngpu-02,,{TOKEN},,\ngpu-03,http://h:1,,,\n"
    )
    report = _import(text, dry_run=True)
    assert report.ok and report.dry_run
    assert (report.created, report.updated) == (["gpu-03"], ["gpu-01"])
    assert report.unchanged == ["gpu-02"]
    assert Node.objects.count() == 2
    assert Node.objects.get(pk=node.pk).agent_url == "http://10.0.0.1:9400"


def test_without_update_an_import_still_refuses_registered_names():
    _register()
    rows = node_files.parse_csv("name,agent_url\ngpu-01,http://10.0.0.1:9400\n")
    report = registration.import_nodes(rows)
    assert _errors(report) == {(1, "name"), (1, "agent_url")}
    assert Node.objects.get().agent_url == "http://10.0.0.1:9400"


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (node_files.parse_csv, "name,token\nx,y\n"),
        (node_files.parse_csv, "name,agent_url\nx,http://h:1,extra\n"),
        (node_files.parse_yaml, "- [not, a, mapping]\n"),
        (node_files.parse_yaml, "key: [unclosed\n"),
    ],
)
def test_malformed_files_are_refused_with_a_reason(parse, text):
    with pytest.raises(node_files.ParseError):
        parse(text)


def test_tokens_stay_readable_through_a_key_rotation(settings):
    old, new = crypto.generate_key(), crypto.generate_key()
    settings.FIELD_ENCRYPTION_KEYS = [old]
    node = _register()
    raw_before = _raw_token_column("gpu-01")
    settings.FIELD_ENCRYPTION_KEYS = [new, old]
    assert Node.objects.get(pk=node.pk).agent_token == TOKEN
    assert registration.reencrypt_tokens() == 1
    assert _raw_token_column("gpu-01") != raw_before
    settings.FIELD_ENCRYPTION_KEYS = [new]
    assert Node.objects.get(pk=node.pk).agent_token == TOKEN
    settings.FIELD_ENCRYPTION_KEYS = [old]
    with pytest.raises(crypto.DecryptionError):
        _ = Node.objects.get(pk=node.pk).agent_token
    # The poller skips the token it cannot read rather than failing the whole cycle.
    assert services.agent_targets()[0].token == ""


def test_the_poller_presents_the_decrypted_token():
    node = _register()
    [target] = services.agent_targets([node.pk])
    assert (target.url, target.token) == ("http://10.0.0.1:9400", TOKEN)


def test_production_without_an_encryption_key_fails_the_deploy_check(settings):
    settings.FIELD_ENCRYPTION_KEYS = []
    [error] = crypto.check_field_encryption_key(None)
    assert error.id == "portal.E001"
    settings.FIELD_ENCRYPTION_KEYS = [crypto.generate_key()]
    assert crypto.check_field_encryption_key(None) == []


def test_a_malformed_encryption_key_stops_the_portal_at_start(tmp_path):
    import subprocess

    env = procs.child_env(
        DJANGO_SETTINGS_MODULE="portal.settings", FIELD_ENCRYPTION_KEY="not-a-key",
        PORTAL_VAR_DIR=str(tmp_path),
    )  # fmt: skip
    result = subprocess.run(
        [procs.PYTHON, "-c", "import django; django.setup()"],
        cwd=procs.REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert "FIELD_ENCRYPTION_KEY: key 1 is not a Fernet key" in result.stderr


# --- connection test against real agents ------------------------------------------------


def test_a_connection_test_reports_the_agents_gpus(sim_agents):
    agents = sim_agents(1, 4)
    result = connection_test.test_connection(agents.urls[0], agents.token)
    assert result.ok and result.error == ""
    assert result.gpu_count == 4 and sum(result.models.values()) == 4
    assert result.hostname.startswith("sim") and result.latency_ms > 0
    assert not Node.objects.exists()


def test_a_connection_test_with_a_wrong_token_reports_the_refusal(sim_agents):
    agents = sim_agents(1, 1)
    result = connection_test.test_connection(agents.urls[0], "wrong-token")
    assert not result.ok and "401" in result.error and result.gpu_count == 0


def test_a_connection_test_to_a_closed_port_fails_cleanly():
    result = connection_test.test_connection(f"http://127.0.0.1:{procs.free_port()}", TOKEN)
    assert not result.ok and result.error


@pytest.mark.parametrize(
    "url", ["http://gpu-node-01:9400", "https://gpu.rack-7.example.com.", "http://[::1]:9400"]
)
def test_bare_and_dotted_host_names_and_ip_literals_are_accepted(url):
    node = registration.register_node(name="gpu-01", agent_url=url, token=TOKEN)
    assert node.agent_url == url.rstrip("/")
