"""The audit log is append-only: no path changes or removes an entry, whoever asks.

The model, its queryset, the database (a trigger, whoever connects), the Django admin and
the API each refuse; after every attempt the entry reads as it did.
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction
from django.test import Client

from audit.interface import AuditEntry, record
from tests import api, clients

pytestmark = pytest.mark.django_db


@pytest.fixture
def entry() -> AuditEntry:
    return record(
        "node.updated",
        target_type="agents.node",
        target_id="7",
        target_repr="gpu-07",
        address="203.0.113.9",
        before={"state": "online"},
        after={"state": "draining"},
    )


def _row(entry: AuditEntry) -> dict:
    return AuditEntry.objects.filter(pk=entry.pk).values().get()


def test_saving_an_existing_entry_is_refused_and_changes_nothing(entry):
    before = _row(entry)
    entry.action = "node.deleted"
    with pytest.raises(PermissionError):
        entry.save()
    assert _row(entry) == before


def test_deleting_an_entry_is_refused(entry):
    before = _row(entry)
    with pytest.raises(PermissionError):
        entry.delete()
    assert _row(entry) == before


def test_queryset_update_and_delete_are_refused(entry):
    before = _row(entry)
    with pytest.raises(PermissionError):
        AuditEntry.objects.filter(pk=entry.pk).update(action="x")
    with pytest.raises(PermissionError):
        AuditEntry.objects.filter(pk=entry.pk).delete()
    with pytest.raises(PermissionError):
        AuditEntry.objects.all().delete()
    assert _row(entry) == before


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_auditentry SET action = 'forged' WHERE id = %s",
        "UPDATE audit_auditentry SET after = NULL, actor_name = 'nobody' WHERE id = %s",
        "DELETE FROM audit_auditentry WHERE id = %s",
    ],
)
def test_the_database_refuses_raw_update_and_delete(entry, sql):
    before = _row(entry)
    with (
        pytest.raises(DatabaseError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, [entry.pk])
    assert _row(entry) == before


def test_an_update_of_every_row_is_refused_too(entry):
    record("login.succeeded", target_type="auth.user", target_id="1")
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditentry SET message = 'x'")
    assert not AuditEntry.objects.filter(message="x").exists()


def test_a_bulk_insert_is_still_allowed(entry):
    # The trigger guards rows that exist; appending stays open.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_auditentry (at, actor_name, action, target_type, target_id, "
            "target_repr, message) VALUES (now(), '', 'x.y', 't', '', '', '')"
        )
    assert AuditEntry.objects.filter(action="x.y").count() == 1


# --- the admin ------------------------------------------------------------------------


@pytest.fixture
def admin_client(alice) -> Client:
    client = clients.page(alice)
    return client


def test_the_admin_shows_an_entry_read_only_to_a_superuser(admin_client, entry):
    response = admin_client.get(f"/admin/audit/auditentry/{entry.pk}/change/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "gpu-07" in body and 'name="_save"' not in body and "deletelink" not in body


def test_the_admin_refuses_to_change_an_entry(admin_client, entry):
    before = _row(entry)
    response = admin_client.post(
        f"/admin/audit/auditentry/{entry.pk}/change/",
        {"action": "forged", "actor_name": "nobody", "target_type": "x"},
    )
    assert response.status_code == 403
    assert _row(entry) == before


def test_the_admin_refuses_to_delete_an_entry(admin_client, entry):
    before = _row(entry)
    assert admin_client.get(f"/admin/audit/auditentry/{entry.pk}/delete/").status_code == 403
    response = admin_client.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert _row(entry) == before


def test_the_admin_offers_no_add_and_no_bulk_delete(admin_client, entry):
    assert admin_client.get("/admin/audit/auditentry/add/").status_code == 403
    changelist = admin_client.get("/admin/audit/auditentry/")
    assert changelist.status_code == 200
    assert "delete_selected" not in changelist.content.decode()
    # Posting the action by hand does nothing either.
    response = admin_client.post(
        "/admin/audit/auditentry/",
        {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"},
    )
    assert response.status_code in (200, 302, 403)
    assert AuditEntry.objects.filter(pk=entry.pk).exists() and _row(entry)["action"] == (
        "node.updated"
    )


def test_the_admin_filters_and_searches_entries(admin_client, entry):
    record("login.failed", target_type="auth.user", target_repr="mallory")
    page = admin_client.get("/admin/audit/auditentry/", {"action": "login.failed"})
    assert "mallory" in page.content.decode() and "gpu-07" not in page.content.decode()
    page = admin_client.get("/admin/audit/auditentry/", {"q": "gpu-07"})
    assert "gpu-07" in page.content.decode() and "mallory" not in page.content.decode()


def test_staff_without_the_view_permission_do_not_see_the_log_in_the_admin(dave, entry):
    client = clients.page(dave)
    assert client.get("/admin/audit/auditentry/").status_code == 403
    assert client.get(f"/admin/audit/auditentry/{entry.pk}/change/").status_code == 403


# --- the API --------------------------------------------------------------------------


class TestAuditEntryAPI(api.ReadTests, api.ReadOnlyTests):
    """Platform admins read the log; every write is a 405 for them and a refusal for anyone
    else, and the entry stays as it was."""

    url = "/api/v1/audit/"
    model = AuditEntry
    readers = ("alice",)
    anonymous_refused = (401,)

    @pytest.fixture
    def instance(self, entry) -> AuditEntry:
        return entry
