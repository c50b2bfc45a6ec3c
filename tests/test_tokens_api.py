"""/api/v1/tokens/: each user's own tokens, made (the key once), listed and revoked, over a
session and over a token; bad input a 400 that makes nothing; a token never makes a wider
one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.interface import AuditEntry
from tests import clients
from tests.api import SIGNED_IN, error_fields
from tokens import interface
from tokens.models import ApiToken

pytestmark = pytest.mark.django_db

URL = "/api/v1/tokens/"
FIELDS = {"id", "name", "hint", "scope", "created", "expires_at", "last_used_at",
          "last_used_from", "revoked_at"}  # fmt: skip


def test_anonymous_callers_are_challenged(bob):
    token, _key = interface.issue(bob, name="ci")
    client = clients.api()
    for response in (client.get(URL), client.post(URL, {"name": "x"}, format="json"),
                     client.delete(f"{URL}{token.pk}/")):  # fmt: skip
        assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert ApiToken.objects.count() == 1 and ApiToken.objects.get().revoked_at is None


@pytest.mark.parametrize("actor", SIGNED_IN, indirect=True)
def test_each_user_lists_and_reads_only_their_own_tokens(actor, alice, bob, carol, dave):
    everyone = {"alice": alice, "bob": bob, "carol": carol, "dave": dave}
    tokens = {name: interface.issue(user, name=f"{name}-ci")[0] for name, user in everyone.items()}
    client = clients.api(actor)
    response = client.get(URL)
    assert response.status_code == 200
    [item] = response.json()["results"]
    mine = tokens[actor.get_username()]
    assert item["id"] == mine.pk and set(item) == FIELDS and "key" not in item
    assert client.get(f"{URL}{mine.pk}/").status_code == 200
    for token in tokens.values():
        if token != mine:  # even the platform admin: a token is its owner's alone
            assert client.get(f"{URL}{token.pk}/").status_code == 404
            assert client.delete(f"{URL}{token.pk}/").status_code == 404
    assert ApiToken.objects.filter(revoked_at__isnull=False).count() == 0


def test_create_answers_the_key_once_and_it_works(bob):
    response = clients.api(bob).post(URL, {"name": "ci", "scope": "read"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    key = body["key"]
    token = ApiToken.objects.get(pk=body["id"])
    assert (token.name, token.scope, token.user, token.created_by) == ("ci", "read", bob, bob)
    # No expiry asked for: the longest allowed.
    assert abs(token.expires_at - timezone.now() - timedelta(days=365)) < timedelta(minutes=1)
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 200
    # Never again: not in the list, not in the detail, not in the audit log.
    assert key not in clients.api(bob).get(URL).content.decode()
    assert key not in clients.api(bob).get(f"{URL}{token.pk}/").content.decode()
    assert key not in str(list(AuditEntry.objects.values()))
    assert AuditEntry.objects.filter(action="api_token.created", target_id=str(token.pk)).exists()


def test_delete_revokes_keeps_the_row_and_stops_the_key(bob):
    token, key = interface.issue(bob, name="ci")
    response = clients.api(bob).delete(f"{URL}{token.pk}/")
    assert response.status_code == 204
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401
    listed = clients.api(bob).get(URL, {"active": "false"}).json()["results"]
    assert [item["id"] for item in listed] == [token.pk] and listed[0]["revoked_at"]
    assert clients.api(bob).get(URL, {"active": "true"}).json()["results"] == []
    assert AuditEntry.objects.filter(action="api_token.revoked").count() == 1


def test_tokens_cannot_be_changed_only_made_and_revoked(bob):
    token, _key = interface.issue(bob, name="ci", scope="read")
    client = clients.api(bob)
    assert client.patch(f"{URL}{token.pk}/", {"scope": "write"}, format="json").status_code == 405
    assert client.put(f"{URL}{token.pk}/", {"name": "x"}, format="json").status_code == 405
    token.refresh_from_db()
    assert (token.name, token.scope) == ("ci", "read")


@pytest.mark.parametrize(
    "data, field",
    [
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "ci", "scope": "admin"}, "scope"),
        ({"name": "ci", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "ci", "expires_at": "9999-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "ci", "expires_at": "tomorrow"}, "expires_at"),
    ],
)
def test_bad_input_is_a_400_on_its_field_and_makes_nothing(bob, data, field):
    before = AuditEntry.objects.count()
    response = clients.api(bob).post(URL, data, format="json")
    assert response.status_code == 400, response.content
    assert field in error_fields(response)
    assert not ApiToken.objects.exists() and AuditEntry.objects.count() == before


def test_token_max_days_is_a_setting(bob, settings):
    settings.TOKEN_MAX_DAYS = 10
    later = (timezone.now() + timedelta(days=11)).isoformat()
    response = clients.api(bob).post(URL, {"name": "ci", "expires_at": later}, format="json")
    assert response.status_code == 400 and "expires_at" in error_fields(response)
    sooner = (timezone.now() + timedelta(days=9)).isoformat()
    assert clients.api(bob).post(URL, {"name": "ci", "expires_at": sooner}).status_code == 201


def test_a_write_token_makes_tokens_but_never_wider_or_longer_lived_than_itself(bob):
    ends = timezone.now() + timedelta(days=5)
    _parent, key = interface.issue(bob, name="parent", scope="write", expires_at=ends)
    client = clients.bearer(key)
    later = (ends + timedelta(days=1)).isoformat()
    response = client.post(URL, {"name": "child", "expires_at": later}, format="json")
    assert response.status_code == 400 and "expires_at" in error_fields(response)
    response = client.post(URL, {"name": "child", "scope": "read"}, format="json")
    assert response.status_code == 201
    # Its default expiry is the parent's.
    assert ApiToken.objects.get(pk=response.json()["id"]).expires_at == ends
    assert ApiToken.objects.count() == 2


def test_a_read_token_makes_no_token_and_revokes_none(bob):
    other, _ = interface.issue(bob, name="other")
    _token, key = interface.issue(bob, name="reader", scope="read")
    client = clients.bearer(key)
    assert client.get(URL).status_code == 200
    assert client.post(URL, {"name": "x", "scope": "read"}, format="json").status_code == 403
    assert client.delete(f"{URL}{other.pk}/").status_code == 403
    assert ApiToken.objects.count() == 2 and not ApiToken.objects.filter(revoked_at__isnull=False)


def test_a_token_can_revoke_itself(bob):
    token, key = interface.issue(bob, name="ci")
    assert clients.bearer(key).delete(f"{URL}{token.pk}/").status_code == 204
    assert clients.bearer(key).get(URL).status_code == 401


def test_the_list_filters_orders_and_pages(bob):
    for name in ("b-ci", "a-laptop", "c-ci"):
        interface.issue(bob, name=name, scope="read" if name == "a-laptop" else "write")
    client = clients.api(bob)
    names = lambda r: [i["name"] for i in r.json()["results"]]  # noqa: E731
    assert names(client.get(URL, {"ordering": "name"})) == ["a-laptop", "b-ci", "c-ci"]
    assert names(client.get(URL, {"scope": "read"})) == ["a-laptop"]
    assert names(client.get(URL, {"name": "ci", "ordering": "-name"})) == ["c-ci", "b-ci"]
    page = client.get(URL, {"limit": 1, "ordering": "name"}).json()
    assert page["count"] == 3 and len(page["results"]) == 1 and page["next"]
    assert client.get(URL, {"scope": "root"}).status_code == 400


def test_the_schema_describes_the_endpoints_and_the_bearer_scheme(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    for path in ("/api/v1/tokens/", "/api/v1/tokens/{id}/", "/api/v1/service-accounts/",
                 "/api/v1/service-accounts/{id}/tokens/",
                 "/api/v1/service-accounts/{id}/tokens/{token_id}/"):  # fmt: skip
        assert path in schema["paths"], path
    created = schema["paths"]["/api/v1/tokens/"]["post"]["responses"]["201"]
    assert "NewApiToken" in str(created)
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
