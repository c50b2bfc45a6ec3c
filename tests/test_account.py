"""A user's own page: their API tokens, made (the key shown once), listed and revoked."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from tests import clients
from tokens.models import ApiToken

pytestmark = pytest.mark.django_db

ACCOUNT = reverse("tokens:account")


def _api_status(key: str) -> int:
    client = clients.bearer(key)
    return client.get("/api/v1/nodes/").status_code


def _create(client: Client, **fields) -> object:
    data = {"name": "laptop", "scope": "write", "expires_in_days": 30, **fields}
    return client.post(ACCOUNT, data)


@pytest.fixture
def bob_client(client: Client, bob) -> Client:
    client.force_login(bob)
    return client


def _new_key(body: str) -> str:
    start = body.index('id="new-api-token"')
    return body[body.index(">", start) + 1 : body.index("</code>", start)]


def test_the_account_page_is_in_the_navigation(bob_client):
    body = bob_client.get(reverse("telemetry:dashboard")).content.decode()
    assert f'href="{ACCOUNT}"' in body


def test_a_new_token_is_shown_once_then_only_its_hint(bob_client, bob):
    assert bob_client.get(ACCOUNT).context["new_key"] == ""
    response = _create(bob_client, name="laptop", scope="read", expires_in_days=7)
    assert response.status_code == 302 and response["Location"] == ACCOUNT
    [token] = ApiToken.objects.filter(user=bob)
    assert (token.name, token.scope) == ("laptop", "read")
    assert abs(token.expires_at - token.created - timedelta(days=7)) < timedelta(minutes=1)
    first = bob_client.get(ACCOUNT)
    key = _new_key(first.content.decode())
    assert key.startswith(token.hint.rstrip("…")) and "no-store" in first["Cache-Control"]
    second = bob_client.get(ACCOUNT).content.decode()
    assert key not in second and token.hint in second
    assert _api_status(key) == 200


def test_several_tokens_live_side_by_side_and_revoking_one_leaves_the_others(bob_client, bob):
    _create(bob_client, name="ci")
    ci_key = _new_key(bob_client.get(ACCOUNT).content.decode())
    _create(bob_client, name="laptop")
    laptop_key = _new_key(bob_client.get(ACCOUNT).content.decode())
    ci = ApiToken.objects.get(user=bob, name="ci")
    response = bob_client.post(reverse("tokens:token_revoke", args=[ci.pk]), follow=True)
    assert response.status_code == 200
    ci.refresh_from_db()
    assert ci.revoked_at is not None  # kept, marked
    assert _api_status(ci_key) == 401 and _api_status(laptop_key) == 200
    # Revoking again is harmless.
    assert bob_client.post(reverse("tokens:token_revoke", args=[ci.pk])).status_code == 302


@pytest.mark.parametrize(
    "fields, field",
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"scope": "admin"}, "scope"),
        ({"expires_in_days": 0}, "expires_in_days"),
        ({"expires_in_days": 366}, "expires_in_days"),
    ],
)
def test_bad_input_is_shown_on_its_field_and_makes_nothing(bob_client, fields, field):
    response = _create(bob_client, **fields)
    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert not ApiToken.objects.exists()


def test_another_user_cannot_see_or_revoke_your_tokens(bob_client, bob, carol):
    _create(bob_client, name="bobs")
    key = _new_key(bob_client.get(ACCOUNT).content.decode())
    token = ApiToken.objects.get(user=bob)
    other = clients.page(carol)
    page = other.get(ACCOUNT)
    assert list(page.context["tokens"]) == [] and token.hint not in page.content.decode()
    assert other.post(reverse("tokens:token_revoke", args=[token.pk])).status_code == 404
    assert _api_status(key) == 200


def test_anonymous_visitors_are_sent_to_log_in(client, bob):
    for response in (client.get(ACCOUNT), _create(client)):
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("login"))
    assert not ApiToken.objects.exists()


def test_revoking_is_post_only(bob_client, bob):
    _create(bob_client)
    token = ApiToken.objects.get(user=bob)
    assert bob_client.get(reverse("tokens:token_revoke", args=[token.pk])).status_code == 405
    token.refresh_from_db()
    assert token.revoked_at is None


def test_token_changes_need_the_csrf_token(bob):
    client = clients.page(bob, enforce_csrf_checks=True)
    assert _create(client).status_code == 403
    assert not ApiToken.objects.exists()


def test_the_account_page_speaks_simplified_chinese(bob_client):
    body = bob_client.get(ACCOUNT, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "API 令牌" in body
