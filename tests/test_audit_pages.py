"""The audit log page and API: for platform admins only, filterable, each change a diff
that escapes what it shows; the CSV export keeps formulas out of spreadsheets."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.diff import DiffRow, diff_rows
from audit.interface import AuditEntry, record
from tests import clients
from tests.api import error_fields
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PAGE = "/audit/"
EXPORT = "/audit/export.csv"
API = "/api/v1/audit/"


@pytest.fixture
def ivy(db):
    """An auditor: not staff, not a superuser, granted only the right to read the log."""
    return UserFactory(username="ivy", permissions=["audit.view_auditentry"])


@pytest.fixture
def entries(alice, carol) -> dict[str, AuditEntry]:
    return {
        "login": record("login.succeeded", carol, actor=carol, address="203.0.113.9"),
        "failed": record(
            "login.failed", target_type="auth.user", target_repr="mallory", address="198.51.100.4"
        ),
        "node": record(
            "node.updated",
            target_type="agents.node",
            target_id="42",
            target_repr="gpu-42",
            actor=alice,
            before={"state": "online", "labels": {"rack": "r1"}},
            after={"state": "draining", "labels": {"rack": "r1"}},
        ),
        "quota": record(
            "quota.updated", target_type="quotas.quota", target_id="3", tenant_id=7, actor=alice
        ),
    }


def _shown(response, among: dict[str, AuditEntry] | None = None) -> list[int]:
    """The entries the page shows; ``among``: only those (signing the client in records a
    login of its own)."""
    shown = [entry.pk for entry, _diff in response.context["rows"]]
    if among is None:
        return shown
    known = {entry.pk for entry in among.values()}
    return [pk for pk in shown if pk in known]


# --- who may read -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "status"),
    [("alice", 200), ("ivy", 200), ("bob", 403), ("carol", 403), ("dave", 403)],
)
def test_the_page_is_for_those_who_may_read_the_log(request, entries, name, status):
    user = request.getfixturevalue(name)
    assert clients.page(user).get(PAGE).status_code == status
    assert clients.page(user).get(EXPORT).status_code == status


def test_an_anonymous_visitor_is_sent_to_the_login_page(entries):
    for url in (PAGE, EXPORT):
        response = clients.page().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_sidebar_links_the_log_only_for_its_readers(alice, ivy, bob, dave):
    assert f'href="{PAGE}"' in clients.page(alice).get("/").content.decode()
    assert f'href="{PAGE}"' in clients.page(ivy).get("/").content.decode()
    for user in (bob, dave):
        assert f'href="{PAGE}"' not in clients.page(user).get("/").content.decode()


@pytest.mark.parametrize(("name", "allowed"), [("alice", True), ("ivy", True), ("bob", False),
                                              ("carol", False), ("dave", False)])  # fmt: skip
def test_the_api_is_for_those_who_may_read_the_log(request, entries, name, allowed):
    client = clients.api(request.getfixturevalue(name))
    listing = client.get(API)
    detail = client.get(f"{API}{entries['node'].pk}/")
    if allowed:
        assert listing.status_code == detail.status_code == 200
        assert listing.json()["count"] == 4
        assert detail.json()["after"] == {"state": "draining", "labels": {"rack": "r1"}}
    else:
        assert listing.status_code == detail.status_code == 403
        assert "gpu-42" not in listing.content.decode() + detail.content.decode()


# --- the page -----------------------------------------------------------------------------


def test_the_page_lists_the_newest_first_with_the_changes_as_a_diff(alice, entries):
    response = clients.page(alice).get(PAGE)
    assert _shown(response, entries) == [e.pk for e in reversed(entries.values())]
    body = response.content.decode()
    assert "gpu-42" in body and "mallory" in body and "198.51.100.4" in body
    diff = {entry.pk: rows for entry, rows in response.context["rows"]}[entries["node"].pk]
    assert DiffRow("state", '"online"', '"draining"', True) in diff
    assert DiffRow("labels", '{"rack": "r1"}', '{"rack": "r1"}', False) in diff
    assert 'class="audit-changed"' in body


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"actor": "ALICE"}, ["quota", "node"]),
        ({"action": "login"}, ["failed", "login"]),
        ({"action": "login.failed"}, ["failed"]),
        ({"action": "node.upd"}, []),
        ({"target_type": "agents.node"}, ["node"]),
        ({"target_id": "42"}, ["node"]),
        ({"tenant": "7"}, ["quota"]),
        ({"target_type": "auth.user", "action": "login.succeeded"}, ["login"]),
    ],
)
def test_the_page_filters(alice, entries, query, expected):
    response = clients.page(alice).get(PAGE, query)
    assert _shown(response, entries) == [entries[name].pk for name in expected]


def test_the_page_filters_by_day(alice, entries):
    today = timezone.localdate()
    tomorrow = today + timedelta(days=1)
    response = clients.page(alice).get(
        PAGE, {"since": today.isoformat(), "until": today.isoformat()}
    )
    assert len(_shown(response, entries)) == 4
    assert _shown(clients.page(alice).get(PAGE, {"since": tomorrow.isoformat()})) == []
    assert (
        _shown(clients.page(alice).get(PAGE, {"until": (today - timedelta(days=1)).isoformat()}))
        == []
    )


def test_a_bad_filter_is_shown_beside_its_field_and_lists_nothing(alice, entries):
    response = clients.page(alice).get(PAGE, {"since": "yesterday", "tenant": "x"})
    assert response.status_code == 200
    assert _shown(response) == []
    assert set(response.context["form"].errors) == {"since", "tenant"}


def test_what_the_log_holds_is_escaped_on_the_page(alice):
    record(
        "node.updated",
        target_type="agents.node",
        target_repr="<img src=x onerror=alert(1)>",
        before={"name": "<script>alert(1)</script>"},
        after={"name": "</td><b>bold</b>"},
        message="<i>hi</i>",
    )
    body = clients.page(alice).get(PAGE).content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body and "<b>bold" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "&lt;i&gt;hi&lt;/i&gt;" in body


def test_the_page_is_paginated_and_keeps_its_filters(alice):
    for n in range(60):
        record("node.updated", target_type="agents.node", target_id=str(n))
    record("login.failed", target_type="auth.user")
    first = clients.page(alice).get(PAGE, {"action": "node"})
    assert len(_shown(first)) == 50 and first.context["page"].paginator.count == 60
    assert "?action=node&amp;page=2" in first.content.decode()
    second = clients.page(alice).get(PAGE, {"action": "node", "page": "2"})
    assert len(_shown(second)) == 10
    # A page past the end shows the last one, not an error.
    assert clients.page(alice).get(PAGE, {"page": "999"}).status_code == 200


def test_a_filter_that_matches_nothing_says_so(alice):
    response = clients.page(alice).get(PAGE, {"action": "nothing"})
    assert "No entry matches these filters." in response.content.decode()


# --- the export ---------------------------------------------------------------------------


def _csv(response) -> list[dict[str, str]]:
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_the_export_holds_what_the_filters_chose(alice, entries):
    response = clients.page(alice).get(EXPORT, {"action": "node"})
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    [row] = _csv(response)
    assert (row["action"], row["target_id"], row["actor_name"]) == ("node.updated", "42", "alice")
    assert row["after"] == '{"labels": {"rack": "r1"}, "state": "draining"}'


def test_the_export_writes_formulas_as_text(alice):
    for name in ('=HYPERLINK("http://evil")', "+1", "-1", "@SUM(A1)"):
        record("login.failed", target_type="auth.user", target_repr=name)
    rows = _csv(clients.page(alice).get(EXPORT, {"action": "login.failed"}))
    assert sorted(row["target_repr"] for row in rows) == sorted(
        ['\'=HYPERLINK("http://evil")', "'+1", "'-1", "'@SUM(A1)"]
    )


def test_an_export_with_a_bad_filter_is_400(alice, entries):
    response = clients.page(alice).get(EXPORT, {"tenant": "x"})
    assert response.status_code == 400 and "tenant" in response.json()


# --- the API's filters --------------------------------------------------------------------


def test_the_api_filters_and_orders(alice, entries):
    client = clients.api(alice)
    ids = lambda response: [item["id"] for item in response.json()["results"]]  # noqa: E731
    assert ids(client.get(API, {"action": "login"})) == [entries["failed"].pk, entries["login"].pk]
    assert ids(client.get(API, {"tenant": 7})) == [entries["quota"].pk]
    assert ids(client.get(API, {"actor_id": alice.pk, "ordering": "at"})) == [
        entries["node"].pk, entries["quota"].pk
    ]  # fmt: skip
    later = (timezone.now() + timedelta(minutes=1)).isoformat()
    assert ids(client.get(API, {"after": later})) == []
    assert len(ids(client.get(API, {"before": later}))) == 4


@pytest.mark.parametrize(
    "query", [{"tenant": "x"}, {"since": "2026-13-01"}, {"after": "soon"}, {"actor_id": "0"},
              {"ordering": "actor_name"}],
)  # fmt: skip
def test_a_bad_api_filter_is_400_naming_it(alice, entries, query):
    response = clients.api(alice).get(API, query)
    assert response.status_code == 400
    assert set(error_fields(response)) == set(query)


def test_the_api_entry_carries_every_field(alice, entries):
    data = clients.api(alice).get(f"{API}{entries['login'].pk}/").json()
    assert data | {"at": None} == {
        "id": entries["login"].pk, "at": None, "actor": entries["login"].actor_id,
        "actor_name": "carol", "address": "203.0.113.9", "action": "login.succeeded",
        "target_type": "auth.user", "target_id": str(entries["login"].actor_id),
        "target_repr": "carol", "tenant_id": None, "before": None, "after": None, "message": "",
    }  # fmt: skip


# --- the pieces ---------------------------------------------------------------------------


def test_an_address_that_is_no_address_is_stored_as_none(db):
    assert record("x.y", address="testserver").address is None
    assert record("x.y", address=" 2001:DB8::1 ").address == "2001:db8::1"


def test_the_diff_of_a_creation_a_deletion_and_a_value_that_is_no_mapping():
    assert diff_rows(None, {"a": 1}) == [DiffRow("a", "", "1", True)]
    assert diff_rows({"a": 1}, None) == [DiffRow("a", "1", "", True)]
    assert diff_rows({"a": 1, "b": 2}, {"b": 3, "c": 4}) == [
        DiffRow("a", "1", "", True), DiffRow("b", "2", "3", True), DiffRow("c", "", "4", True),
    ]  # fmt: skip
    assert diff_rows([1], [1, 2]) == [DiffRow("", "[1]", "[1, 2]", True)]
    assert diff_rows(None, None) == []
    long = diff_rows(None, {"a": "x" * 2000})[0].after
    assert len(long) == 500 and long.endswith("…")


def test_an_entry_reads_the_same_after_its_user_is_deleted(alice, carol, entries):
    carol_id = carol.pk
    carol.delete()
    entry = AuditEntry.objects.get(pk=entries["login"].pk)
    assert (entry.actor_id, entry.actor_name) == (carol_id, "carol")
    assert "carol" in clients.page(alice).get(PAGE, {"actor": "carol"}).content.decode()
    data = clients.api(alice).get(f"{API}{entry.pk}/").json()
    assert (data["actor"], data["actor_name"]) == (carol_id, "carol")
    assert clients.page(alice).get(f"/admin/audit/auditentry/{entry.pk}/change/").status_code == 200


def test_the_page_names_each_targets_kind_in_the_readers_language(alice, entries):
    record("thing.gone", target_type="nosuch.model", target_id="1", actor=alice)
    body = clients.page(alice, HTTP_ACCEPT_LANGUAGE="zh-hans").get(PAGE).content.decode()
    # Django's own catalogue: auth.user is "用户"; a model that is gone keeps its label.
    assert 'title="auth.user">用户' in body and ">nosuch.model" in body
    assert ">auth.user #" not in body
