"""Logins, logouts and failed logins in the audit log, with the source address; a lockout
once when it begins; and what a caller can make the portal write stays bounded."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

from audit.interface import AuditEntry
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


def _entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


def test_a_login_is_recorded_with_who_and_the_address(bob):
    assert _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob", "bob-pw-1").status_code == 302
    [entry] = _entries("login.succeeded")
    assert (entry.actor_id, entry.actor_name, entry.address) == (bob.pk, "bob", "203.0.113.9")
    assert (entry.target_type, entry.target_id) == ("auth.user", str(bob.pk))


def test_a_failed_login_is_recorded_with_the_name_tried_and_the_address(bob):
    assert _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob", "wrong").status_code == 200
    [entry] = _entries("login.failed")
    assert entry.actor_id is None and entry.actor_name == ""
    assert entry.address == "203.0.113.9"
    assert (entry.target_id, entry.target_repr) == (str(bob.pk), "bob")
    assert entry.after == {"username": "bob", "path": LOGIN, "directories": ["local"]}
    # The password tried is nowhere in the entry.
    assert "wrong" not in str(AuditEntry.objects.filter(pk=entry.pk).values().get())


def test_a_failed_login_for_a_name_no_one_has_is_recorded_too(bob):
    _log_in(Client(REMOTE_ADDR="198.51.100.4"), "mallory", "guess")
    [entry] = _entries("login.failed")
    assert (entry.target_id, entry.target_repr, entry.address) == ("", "mallory", "198.51.100.4")


def test_a_hostile_user_name_is_stored_as_text_and_cut_to_length(bob):
    name = "<script>x</script>\n" + "a" * 400
    # Longer than django-axes' column too: that used to be a 500.
    assert _log_in(Client(), name, "guess").status_code == 200
    [entry] = _entries("login.failed")
    assert entry.target_repr == name[:150] and entry.after["username"] == name[:150]


def test_the_admin_login_is_recorded_too(alice):
    Client(REMOTE_ADDR="203.0.113.5").post(
        "/admin/login/", {"username": "alice", "password": "wrong"}
    )
    [entry] = _entries("login.failed")
    assert entry.target_repr == "alice" and entry.after["path"] == "/admin/login/"


def test_a_logout_is_recorded(bob):
    client = Client(REMOTE_ADDR="203.0.113.9")
    _log_in(client, "bob", "bob-pw-1")
    assert client.post("/accounts/logout/").status_code == 302
    [entry] = _entries("logout")
    assert (entry.actor_id, entry.address) == (bob.pk, "203.0.113.9")


def test_a_logout_without_a_session_records_nothing(db):
    Client().post("/accounts/logout/")
    assert not _entries("logout")


def test_a_lockout_is_recorded_once_and_refused_attempts_add_nothing(bob):
    client = Client(REMOTE_ADDR="203.0.113.9")
    for _ in range(3):
        _log_in(client, "bob", "wrong")
    [lockout] = _entries("login.locked_out")
    assert (lockout.target_repr, lockout.address) == ("bob", "203.0.113.9")
    assert lockout.after == {"username": "bob", "failures": 3}
    assert len(_entries("login.failed")) == 3
    # While locked out, attempts are refused before the password is read: they cost the
    # caller nothing, so they write nothing (django-axes still counts them).
    count = AuditEntry.objects.count()
    for password in ("wrong", "bob-pw-1", "again"):
        assert _log_in(client, "bob", password).status_code == 429
    assert AuditEntry.objects.count() == count


def test_behind_a_trusted_proxy_the_forwarded_address_is_recorded(bob, settings):
    settings.BEHIND_TLS_PROXY = True
    settings.TRUSTED_PROXY_HOPS = 1
    proxy = Client(REMOTE_ADDR="10.1.1.1")
    _log_in(proxy, "bob", "wrong", HTTP_X_FORWARDED_FOR="1.2.3.4, 198.51.100.7")
    [entry] = _entries("login.failed")
    assert entry.address == "198.51.100.7"


def test_without_a_proxy_a_forged_forwarded_for_is_not_recorded(bob, settings):
    settings.BEHIND_TLS_PROXY = False
    _log_in(Client(REMOTE_ADDR="203.0.113.9"), "bob", "wrong", HTTP_X_FORWARDED_FOR="10.0.0.1")
    [entry] = _entries("login.failed")
    assert entry.address == "203.0.113.9"


def test_failed_logins_are_recorded_under_the_asgi_handler_too(bob):
    client = AsyncClient()
    for _ in range(3):
        async_to_sync(client.post)(LOGIN, {"username": "bob", "password": "wrong"})
    assert len(_entries("login.failed")) == 3 and len(_entries("login.locked_out")) == 1


def test_a_login_without_a_request_records_nothing(bob):
    # Django's test client logs in without a request: no caller, no address, no entry.
    Client().login(username="bob", password="wrong")
    assert not AuditEntry.objects.exists()


# --- the API's tokens ----------------------------------------------------------------------


def test_guessing_api_tokens_is_recorded_once_per_lockout_not_per_guess(bob):
    for n in range(2):
        assert (
            clients.bearer(f"guess{n}", REMOTE_ADDR="203.0.113.9").get("/api/v1/nodes/").status_code
            == 401
        )
    # Below the limit: the log (portal.security) has each guess, the audit log none.
    assert not AuditEntry.objects.exists()
    assert (
        clients.bearer("guess2", REMOTE_ADDR="203.0.113.9").get("/api/v1/nodes/").status_code == 401
    )
    [entry] = AuditEntry.objects.all()
    assert entry.action == "api_token.locked_out"
    assert (entry.address, entry.target_repr) == ("203.0.113.9", "203.0.113.9")
    assert entry.after == {"failures": 3, "minutes": 15}
    # Blocked: a hundred more guesses write nothing.
    for n in range(100):
        assert (
            clients.bearer(f"more{n}", REMOTE_ADDR="203.0.113.9").get("/api/v1/nodes/").status_code
            == 429
        )
    assert AuditEntry.objects.count() == 1


def test_a_good_api_token_is_not_a_login_and_records_nothing(bob):
    _token, key = issue(bob, name="ci")
    issued = AuditEntry.objects.count()  # the token's making is audited; its use is not
    assert clients.bearer(key, REMOTE_ADDR="203.0.113.9").get("/api/v1/nodes/").status_code == 200
    assert AuditEntry.objects.count() == issued
