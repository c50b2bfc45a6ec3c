"""Personal API tokens: ``Authorization: Bearer gpp_…`` (tokens/)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.interface import AuditEntry
from tests import clients
from tokens import interface
from tokens.models import ApiToken

pytestmark = pytest.mark.django_db


def test_the_key_is_shown_once_and_only_its_digest_is_kept(bob):
    token, key = interface.issue(bob, name="ci")
    assert key.startswith("gpp_") and token.prefix in key
    stored = ApiToken.objects.get(pk=token.pk)
    assert key not in (stored.digest, stored.prefix, stored.name)
    assert AuditEntry.objects.filter(action="api_token.created", target_id=str(token.pk)).exists()


def test_a_good_token_reads_and_notes_when_it_was_used(bob):
    token, key = interface.issue(bob, name="ci")
    response = clients.bearer(key).get("/api/v1/nodes/")
    assert response.status_code == 200
    token.refresh_from_db()
    assert token.last_used_at is not None and token.last_used_from == "127.0.0.1"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda key: key[:-1] + ("A" if key[-1] != "A" else "B"),  # wrong secret
        lambda key: "gpp_00000000_" + key.split("_", 2)[2],  # unknown prefix
        lambda key: key.replace("gpp_", "gpx_"),  # not a key at all
        lambda key: key + " extra",  # three words
    ],
)
def test_a_bad_key_is_one_plain_401_with_a_bearer_challenge(bob, mangle):
    _, key = interface.issue(bob, name="ci")
    response = clients.bearer(mangle(key)).get("/api/v1/nodes/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_expired_and_revoked_tokens_stop_working(bob):
    _expired, expired_key = interface.issue(
        bob, name="old", expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert clients.bearer(expired_key).get("/api/v1/nodes/").status_code == 401
    token, key = interface.issue(bob, name="ci")
    assert interface.revoke(token, actor=bob) is True
    assert interface.revoke(token, actor=bob) is False  # once
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401
    assert AuditEntry.objects.filter(action="api_token.revoked").count() == 1


def test_an_inactive_users_token_stops_working(bob):
    _, key = interface.issue(bob, name="ci")
    bob.is_active = False
    bob.save()
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401


def test_a_read_token_reads_but_cannot_write(alice):
    _, key = interface.issue(alice, name="dashboards", scope="read")
    client = clients.bearer(key)
    assert client.get("/api/v1/nodes/").status_code == 200
    response = client.post("/api/v1/nodes/", {"name": "n1", "address": "10.0.0.1"}, format="json")
    assert response.status_code == 403
    assert "read-only" in str(response.json())
