"""Logins: repeated failures lock the user name and address out, and every failure is logged.

The API's token check answers one way for every bad token and stops an address that keeps
guessing.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from axes.models import AccessAttempt
from django.test import AsyncClient, Client
from django.utils import timezone

from tests import clients
from tokens.interface import issue

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


@pytest.fixture(autouse=True)
def _three_tries(settings) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    settings.API_TOKEN_FAILURE_LIMIT = 3


def _log_in(client: Client, username: str, password: str, **extra: str):
    return client.post(LOGIN, {"username": username, "password": password}, **extra)


def test_three_failures_lock_the_user_out_with_a_clear_message(bob):
    client = Client()
    for _ in range(2):
        response = _log_in(client, "bob", "wrong")
        assert response.status_code == 200
        assert "password didn't match" in response.content.decode()
    third = _log_in(client, "bob", "wrong")
    assert third.status_code == 429
    assert "Too many failed logins. Try again in 15 minutes." in third.content.decode()
    # Now even the right password is refused, with the same explanation.
    right = _log_in(client, "bob", "bob-pw-1")
    assert right.status_code == 429
    assert "Try again in 15 minutes" in right.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_lockout_message_is_translated(bob):
    client = Client(headers={"accept-language": "zh-hans"})
    for _ in range(3):
        response = _log_in(client, "bob", "wrong")
    assert response.status_code == 429
    assert "登录失败次数过多，请在 15 分钟后重试。" in response.content.decode()  # noqa: RUF001


def test_the_lockout_ends_after_the_configured_time(bob):
    client = Client()
    for _ in range(3):
        _log_in(client, "bob", "wrong")
    assert _log_in(client, "bob", "bob-pw-1").status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    response = _log_in(client, "bob", "bob-pw-1")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(bob.pk)


def test_a_success_resets_the_count(bob):
    client = Client()
    for _ in range(2):
        _log_in(client, "bob", "wrong")
    assert _log_in(client, "bob", "bob-pw-1").status_code == 302
    client.logout()
    for _ in range(2):
        assert _log_in(client, "bob", "wrong").status_code == 200
    assert _log_in(client, "bob", "bob-pw-1").status_code == 302


def test_another_address_is_not_locked_out_with_the_first(bob):
    for _ in range(3):
        _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob", "wrong")
    assert _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob", "bob-pw-1").status_code == 429
    assert _log_in(Client(REMOTE_ADDR="198.51.100.4"), "bob", "bob-pw-1").status_code == 302


def test_every_failed_login_is_logged_with_its_address(bob, caplog):
    caplog.set_level(logging.WARNING, logger="portal.security")
    _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob\nforged line", "wrong")
    [record] = [r for r in caplog.records if r.name == "portal.security"]
    message = record.getMessage()
    assert "login failed" in message and "address=203.0.113.9" in message
    # The user name is quoted, so what a caller types cannot start a line of its own.
    assert "\n" not in message and "'bob\\nforged line'" in message


def test_the_admin_login_is_counted_and_logged_too(alice, caplog):
    caplog.set_level(logging.WARNING, logger="portal.security")
    client = Client()
    for _ in range(3):
        client.post("/admin/login/", {"username": "alice", "password": "wrong"})
    assert _log_in(client, "alice", "alice-pw-1").status_code == 429
    assert sum("login failed" in r.getMessage() for r in caplog.records) >= 3


def test_forwarded_for_is_ignored_without_a_trusted_proxy(bob, settings, caplog):
    settings.BEHIND_TLS_PROXY = False
    caplog.set_level(logging.WARNING, logger="portal.security")
    # A caller that invents a new X-Forwarded-For each time is still one address.
    for n in range(3):
        _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob", "wrong",
                HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")  # fmt: skip
    assert _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob", "bob-pw-1").status_code == 429
    lines = [r.getMessage() for r in caplog.records if r.name == "portal.security"]
    assert lines and all("address=203.0.113.9" in line for line in lines)


def test_behind_a_trusted_proxy_the_address_it_saw_counts(bob, settings, caplog):
    settings.BEHIND_TLS_PROXY = True
    settings.TRUSTED_PROXY_HOPS = 1
    caplog.set_level(logging.WARNING, logger="portal.security")
    proxy = Client(REMOTE_ADDR="10.1.1.1")
    # The proxy appends the address it saw; what the client put before it is its own claim.
    _log_in(proxy, "bob", "wrong", HTTP_X_FORWARDED_FOR="1.2.3.4, 198.51.100.7")
    [record] = [r for r in caplog.records if r.name == "portal.security"]
    assert "address=198.51.100.7" in record.getMessage()


# --- the API's tokens ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer a b", "Bearer n\u00e9e", "Bearer gpp_01234567_unknown",
     "Bearer {inactive}"],
    ids=["no-key", "spaces", "non-ascii", "unknown", "inactive-user"],
)  # fmt: skip
def test_every_bad_token_gets_the_same_answer(bob, header):
    _token, key = issue(bob, name="ci")
    bob.is_active = False
    bob.save()
    response = clients.authorization(
        header.replace("{inactive}", key), REMOTE_ADDR="203.0.113.9"
    ).get("/api/v1/nodes/")
    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "code": "authentication_failed",
            "message": "Invalid, expired or revoked API token.",
        }
    }
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_address_guessing_tokens_is_stopped_and_logged(bob, caplog):
    caplog.set_level(logging.WARNING, logger="portal.security")
    _token, good = issue(bob, name="ci")
    for n in range(3):
        assert (
            clients.authorization(f"Bearer guess{n}", REMOTE_ADDR="203.0.113.9")
            .get("/api/v1/nodes/")
            .status_code
            == 401
        )
    # Now even a good token from that address waits, so guesses cannot hide among good calls.
    blocked = clients.authorization(f"Bearer {good}", REMOTE_ADDR="203.0.113.9").get(
        "/api/v1/nodes/"
    )
    assert blocked.status_code == 429
    assert blocked.json()["error"]["code"] == "throttled"
    assert "Too many invalid API tokens" in blocked.json()["error"]["message"]
    assert int(blocked["Retry-After"]) > 0
    # Another address is not affected.
    assert (
        clients.authorization(f"Bearer {good}", REMOTE_ADDR="198.51.100.4")
        .get("/api/v1/nodes/")
        .status_code
        == 200
    )
    refused = [r.getMessage() for r in caplog.records if "api token refused" in r.getMessage()]
    assert len(refused) == 3 and all("address=203.0.113.9" in m for m in refused)


def test_the_lockout_page_is_served_by_the_asgi_handler_too(bob):
    # daphne runs the middleware chain asynchronously: django-axes takes another path there.
    client = AsyncClient()
    for _ in range(3):
        response = async_to_sync(client.post)(LOGIN, {"username": "bob", "password": "wrong"})
    assert response.status_code == 429
    assert "Try again in 15 minutes" in response.content.decode()
