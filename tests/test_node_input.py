"""Bad input to node registration: files built to hang or crash the import, tokens that
could never be sent, labels without bounds. Each is refused with a 400 or a form error
naming where, and nothing is written."""

from __future__ import annotations

import csv
import json

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from agents import node_files, registration
from agents.models import Node
from tests import clients
from tests.api import error_fields

pytestmark = pytest.mark.django_db

IMPORT = "/api/v1/nodes/import/"
HEADER = "name,agent_url,token,labels\n"


def _alias_bomb(levels: int, cell: str = "token") -> str:
    """Billion laughs: each level a list of nine aliases of the one before."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    cells = {"name": "bomb", "agent_url": "'http://b:1'"} | {cell: f"*a{levels - 1}"}
    lines.append("nodes: [{" + ", ".join(f"{k}: {v}" for k, v in cells.items()) + "}]")
    return "\n".join(lines)


def _post_yaml(user, text: str):
    return clients.api(user).post(IMPORT, text.encode(), content_type="application/yaml")


# --- YAML ---------------------------------------------------------------------------------


def test_a_yaml_alias_bomb_is_refused_at_once_naming_its_line(alice, client):
    # 490 bytes standing for 387 million strings: 40 s and 3 GiB before the limit. The
    # error naming the aliases shows the limit stopped it before expanding (no timing:
    # a loaded machine must not fail it).
    response = _post_yaml(alice, _alias_bomb(9))
    assert response.status_code == 400
    [error] = error_fields(response)["rows"]
    assert "Line 7" in error["message"] and "aliases" in error["message"]
    client.force_login(alice)
    page = client.post(
        reverse("agents:node_import"),
        {"content": _alias_bomb(9), "format": "yaml", "action": "import"},
    )
    assert page.status_code == 200
    assert "Line 7" in " ".join(page.context["form"].non_field_errors())
    assert not Node.objects.exists()


def test_a_yaml_cell_holding_a_list_is_refused_before_it_is_turned_into_text(alice):
    # Within the alias limit (9^6 values), but a token must be text, and no str() is taken.
    response = _post_yaml(alice, _alias_bomb(6))
    assert response.status_code == 400
    [error] = error_fields(response)["rows"]
    assert (error["row"], error["field"]) == (1, "token")
    assert error["message"] == "Enter text, not a list or a mapping."
    for cell in ("name", "agent_url", "state"):
        report = registration.import_nodes(node_files.parse(_alias_bomb(4, cell), "yaml"))
        assert [(e.row, e.field) for e in report.errors] == [(1, cell)]


def test_an_update_import_refuses_a_list_for_a_name_without_turning_it_into_text(alice):
    registration.register_node(name="gpu-01", agent_url="http://10.0.0.1:9400")
    text = _alias_bomb(6, "name")
    response = clients.api(alice).post(
        IMPORT + "?update=1", text.encode(), content_type="application/yaml"
    )
    assert response.status_code == 400
    assert [(e["row"], e["field"]) for e in error_fields(response)["rows"]] == [(1, "name")]


@pytest.mark.parametrize(
    "text",
    ["[" * 50_000 + "]" * 50_000, "- " * 2000 + "x"],
    ids=["flow", "block"],
)
def test_deeply_nested_yaml_is_a_400_naming_the_line(alice, text):
    response = _post_yaml(alice, text)
    assert response.status_code == 400
    [error] = error_fields(response)["rows"]
    assert "nested deeper than 10 levels" in error["message"] and "Line " in error["message"]


def test_an_alias_to_the_value_holding_it_is_refused():
    with pytest.raises(node_files.ParseError, match="refer to a value that contains it"):
        node_files.parse("nodes: &n [*n]", "yaml")


def test_a_key_written_twice_in_yaml_is_refused_with_both_lines(alice):
    text = "- name: gpu-y\n  agent_url: http://10.0.2.1:9400\n  token: first\n  token: second\n"
    response = _post_yaml(alice, text)
    assert response.status_code == 400
    [error] = error_fields(response)["rows"]
    assert error["message"] == (
        "Line 4, column 3: the key “token” appears twice in this mapping (first on line 3)."
    )
    with pytest.raises(node_files.ParseError, match="“rack” appears twice"):
        node_files.parse("- {name: a, agent_url: 'http://a:1', labels: {rack: 1, rack: 2}}", "yaml")


def test_a_merge_key_may_be_overridden_by_the_mapping_that_merges_it():
    text = (
        "defaults: &d {agent_url: 'http://a:1', state: draining}\n"
        "nodes:\n  - {<<: *d, name: a, state: maintenance}\n"
    )
    [row] = node_files.parse(text, "yaml")
    assert row == {"agent_url": "http://a:1", "state": "maintenance", "name": "a"}


def test_yaml_values_are_read_as_written_not_as_numbers_or_dates():
    text = (
        "- name: 2024-01-01\n  agent_url: http://a:1\n  token: 0x1F\n"
        f"  labels: {{driver: 1.10, on: yes, n: {'9' * 5000}}}\n"
    )
    [row] = node_files.parse(text, "yaml")
    assert row["name"] == "2024-01-01" and row["token"] == "0x1F"
    assert row["labels"] == {"driver": "1.10", "on": "yes", "n": "9" * 5000}
    assert node_files.parse("- {name: a, labels: null, state: ~}", "yaml")[0] == {
        "name": "a",
        "labels": None,
        "state": None,
    }


# --- CSV ----------------------------------------------------------------------------------


def test_a_csv_cell_over_the_csv_modules_limit_is_a_400_naming_row_and_column(alice, client):
    huge = "x" * (csv.field_size_limit() + 1)
    text = HEADER + "gpu-a,http://10.0.1.1:9400,t-a,\n" + f'gpu-b,http://10.0.1.2:9400,"{huge}",\n'
    response = clients.api(alice).post(IMPORT, text.encode(), content_type="text/csv")
    assert response.status_code == 400
    [error] = error_fields(response)["rows"]
    assert (error["row"], error["field"]) == (2, "token")
    assert "Row 2, column token: a cell is longer than" in error["message"]
    client.force_login(alice)
    page = client.post(
        reverse("agents:node_import"), {"content": text, "format": "csv", "action": "check"}
    )
    assert page.status_code == 200
    assert "Row 2, column token" in " ".join(page.context["form"].non_field_errors())
    assert not Node.objects.exists()


def test_csv_with_carriage_returns_for_line_breaks_imports(alice):
    text = HEADER.replace("\n", "\r") + "gpu-a,http://10.0.1.1:9400,t-a,rack=r1\r"
    text += "gpu-b,http://10.0.1.2:9400,t-b,\r\n"
    response = clients.api(alice).post(IMPORT, text.encode(), content_type="text/csv")
    assert response.status_code == 201, response.json()
    assert sorted(Node.objects.values_list("name", flat=True)) == ["gpu-a", "gpu-b"]
    assert Node.objects.get(name="gpu-a").labels == {"rack": "r1"}


def test_a_stray_carriage_return_in_a_csv_row_is_a_row_error_not_a_500(alice, client):
    text = HEADER + "gpu-a\r,http://10.0.1.1:9400,t-a,\n"
    response = clients.api(alice).post(IMPORT, text.encode(), content_type="text/csv")
    assert response.status_code == 400
    assert {(e["row"], e["field"]) for e in error_fields(response)["rows"]} == {
        (1, "agent_url"),
        (2, "name"),
    }
    client.force_login(alice)
    page = client.post(
        reverse("agents:node_import"), {"content": text, "format": "csv", "action": "check"}
    )
    assert page.status_code == 200 and page.context["report"].errors
    assert not Node.objects.exists()


# --- tokens and labels, at every entry point -------------------------------------------------


def _admin_add(client, **fields):
    return client.post(
        reverse("admin:agents_node_add"),
        {"source": "agent", "agent_url": "http://10.0.9.1:9400", "agent_token": "", "labels": "{}",
         "state": "offline", "gpus-TOTAL_FORMS": "0", "gpus-INITIAL_FORMS": "0",
         "gpus-MIN_NUM_FORMS": "0", "gpus-MAX_NUM_FORMS": "1000", **fields},
    )  # fmt: skip


def _entry_errors(client, user, *, token: str = "", labels: dict[str, str] | None = None):
    """The field each entry point names when refusing one node with this token or labels."""
    labels = labels or {}
    text = "\n".join(f"{k}={v}" for k, v in labels.items())
    found: dict[str, object] = {}
    try:
        registration.register_node(name="n-1", agent_url="http://10.0.9.1:9400",
                                   token=token, labels=labels)  # fmt: skip
    except ValidationError as exc:
        found["service"] = sorted(exc.message_dict)
    client.force_login(user)
    node = {"name": "n-1", "agent_url": "http://10.0.9.1:9400", "token": token}
    page = client.post(reverse("agents:node_add"), node | {"state": "offline", "labels": text})
    found["page"] = sorted(page.context["form"].errors) if page.status_code == 200 else []
    api = clients.api(user).post("/api/v1/nodes/", node | {"labels": labels}, format="json")
    found["api"] = sorted(error_fields(api)) if api.status_code == 400 else []
    cells = f"n-1,http://10.0.9.1:9400,{token},{';'.join(text.splitlines())}\n"
    report = registration.import_nodes(node_files.parse(HEADER + cells, "csv"))
    found["import"] = sorted({e.field for e in report.errors})
    admin = _admin_add(client, name="n-1", agent_token=token, labels=json.dumps(labels))
    admin_form = admin.context["adminform"].form if admin.status_code == 200 else None
    found["admin"] = sorted(admin_form.errors) if admin_form else []
    assert not Node.objects.exists()
    return found


@pytest.mark.parametrize(
    "token",
    ["tökén-0123456789", "токен-0123456789", "tok\u00a0en-0123456789", "tok\u202een-012345",
     "tok\u200ben-0123456789", "tok en-0123456789", "tok\ten-0123456789", "tok\x7fen-012345"],
    ids=["latin-1", "cyrillic", "no-break-space", "bidi", "zero-width", "space", "tab", "del"],
)  # fmt: skip
def test_a_token_http_cannot_carry_is_refused_at_every_entry_with_a_field_error(
    client, alice, token
):
    assert _entry_errors(client, alice, token=token) == {
        "service": ["token"], "page": ["token"], "api": ["token"], "import": ["token"],
        "admin": ["agent_token"],
    }  # fmt: skip


def test_the_token_messages_say_what_is_wrong():
    def message(token: str) -> str:
        _cleaned, errors = registration.check_fields({"token": token}, None)
        return " ".join(errors["token"])

    assert "ASCII" in message("tökén") and "HTTP header" in message("tökén")
    assert "spaces, line breaks or control characters" in message("a\tb")
    assert "at most 1024" in message("x" * 1025)
    assert registration.check_fields({"token": "  Ab-0~!/+=  "}, None)[0] == {"token": "Ab-0~!/+="}


@pytest.mark.parametrize(
    "labels",
    [{f"k{i}": "v" for i in range(65)}, {"rack": "v" * 64}, {"k" * 64: "v"},
     {"rack": "a\u202eb"}, {"rack": "a\x00b"}, {"x" * 254 + "/rack": "v"}, {"rack/": "v"},
     {"-rack": "v"}],
    ids=["65-labels", "long-value", "long-name", "bidi-value", "nul-value", "long-prefix",
         "empty-name", "dash-first"],
)  # fmt: skip
def test_labels_past_their_limits_are_refused_at_every_entry(client, alice, labels):
    assert _entry_errors(client, alice, labels=labels) == {
        "service": ["labels"], "page": ["labels"], "api": ["labels"], "import": ["labels"],
        "admin": ["labels"],
    }  # fmt: skip


def test_labels_up_to_their_limits_are_kept():
    labels = {f"k{i}": "v" * 63 for i in range(62)}
    labels |= {"example.com/rack": "r1", "kubernetes.io/hostname": "gpu-01 east"}
    node = registration.register_node(name="n-1", agent_url="http://a:1", labels=labels)
    assert node.labels == labels


def test_a_label_written_twice_as_text_is_refused():
    with pytest.raises(ValueError, match="“rack” appears twice"):
        registration.parse_labels("rack=a;zone=b;rack=c")
    with pytest.raises(ValueError, match="At most 64 labels"):
        registration.parse_labels(";".join(f"k{i}=v" for i in range(65)))
