"""A user's own page: their API token, made, shown once, regenerated and revoked."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

ACCOUNT = reverse("account")
CREATE = reverse("account_token_create")
REVOKE = reverse("account_token_revoke")


def _api_status(key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/v1/nodes/").status_code


@pytest.fixture
def bob_client(client: Client, bob) -> Client:
    client.force_login(bob)
    return client


def test_the_account_page_is_in_the_navigation(bob_client):
    body = bob_client.get(reverse("telemetry:dashboard")).content.decode()
    assert f'href="{ACCOUNT}"' in body


def test_a_new_token_is_shown_once_then_only_its_hint(bob_client, member_user):
    page = bob_client.get(ACCOUNT)
    assert page.status_code == 200 and page.context["hint"] == ""
    response = bob_client.post(CREATE)
    assert response.status_code == 302 and response["Location"] == ACCOUNT
    key = Token.objects.get(user=member_user).key
    first = bob_client.get(ACCOUNT)
    assert key in first.content.decode()
    assert "no-store" in first["Cache-Control"]
    second = bob_client.get(ACCOUNT).content.decode()
    assert key not in second
    assert f"…{key[-4:]}" in second
    assert _api_status(key) == 200


def test_regenerating_invalidates_the_old_token(bob_client, member_user):
    bob_client.post(CREATE)
    old = Token.objects.get(user=member_user).key
    bob_client.post(CREATE)
    new = Token.objects.get(user=member_user).key
    assert new != old
    assert new in bob_client.get(ACCOUNT).content.decode()
    assert _api_status(old) == 401
    assert _api_status(new) == 200


def test_revoking_ends_the_token(bob_client, member_user):
    bob_client.post(CREATE)
    key = Token.objects.get(user=member_user).key
    response = bob_client.post(REVOKE, follow=True)
    assert response.status_code == 200 and response.context["hint"] == ""
    assert not Token.objects.filter(user=member_user).exists()
    assert _api_status(key) == 401
    # Revoking again, with nothing left to revoke, is harmless.
    assert bob_client.post(REVOKE).status_code == 302


def test_another_user_sees_neither_your_token_nor_its_hint(bob_client, member_user):
    bob_client.post(CREATE)
    key = Token.objects.get(user=member_user).key
    carol = Client()
    carol.force_login(get_user_model().objects.create_user("carol", password="carol-pw-1"))
    page = carol.get(ACCOUNT)
    assert page.context["hint"] == "" and page.context["new_key"] == ""
    assert key not in page.content.decode()
    # Carol's own token leaves Bob's alone.
    carol.post(CREATE)
    assert Token.objects.get(user=member_user).key == key


@pytest.mark.parametrize("url", [ACCOUNT, CREATE, REVOKE])
def test_anonymous_visitors_are_sent_to_log_in(client, url):
    response = client.post(url) if url != ACCOUNT else client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    assert not Token.objects.exists()


@pytest.mark.parametrize("url", [CREATE, REVOKE])
def test_token_changes_are_post_only(bob_client, url):
    assert bob_client.get(url).status_code == 405
    assert not Token.objects.exists()


def test_token_changes_need_the_csrf_token(member_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member_user)
    assert client.post(CREATE).status_code == 403
    assert not Token.objects.exists()


def test_the_account_page_speaks_simplified_chinese(bob_client):
    body = bob_client.get(ACCOUNT, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "API 令牌" in body
