"""The Users pages (platform admins): list and search, make a user (the set-password link
shown once), deactivate and reactivate, a new link; the set-password page end to end;
each refused to everyone else with nothing changed."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from audit.interface import AuditEntry
from quotas.choices import Role
from quotas.tenancy import accounts
from quotas.tenancy import services as tenancy
from tests import clients
from tests.factories import UserFactory
from tests.tenants import (
    ACTORS,
    PLATFORM_ADMINS,
    teams_fixture,  # noqa: F401 (the teams fixture)
)
from tokens import interface as tokens
from tokens.services import create_service_account

pytestmark = pytest.mark.django_db
User = get_user_model()
NEW_PASSWORD = "Sturdy-horse-batteries-42"


def shown_link(body: str) -> str | None:
    """The set-password link a page shows once, if it shows one."""
    found = re.search(r'id="password-link"[^>]*>([^<]+)</code>', body)
    return found.group(1).strip() if found else None


def set_password(link: str, password: str = NEW_PASSWORD) -> Client:
    """Open a set-password link as its new user would and choose ``password``."""
    browser = Client()
    opened = browser.get(link)
    # Django's view moves the token out of the address into the session first.
    assert opened.status_code == 302, opened.content
    form = browser.get(opened["Location"])
    assert form.status_code == 200 and form.context["validlink"], form.content
    done = browser.post(opened["Location"], {"new_password1": password, "new_password2": password})
    assert done.status_code == 302 and done["Location"] == "/accounts/set-password/done/"
    return browser


def log_in(username: str, password: str) -> Client:
    client = Client()
    response = client.post("/accounts/login/", {"username": username, "password": password})
    assert response.status_code == 302, response.content
    return client


def _state(*users) -> tuple:
    return (
        User.objects.count(),
        AuditEntry.objects.count(),
        [User.objects.filter(pk=u.pk).values("is_active", "password").get() for u in users],
    )


# --- who may -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTORS)
def test_only_platform_admins_reach_the_users_pages_and_change_users(teams, name):
    client = clients.page(teams.user(name))
    bob = teams.user("bob")
    answers = [
        client.get(url).status_code for url in ("/users/", "/users/add/", f"/users/{bob.pk}/")
    ]
    before = _state(bob)
    writes = [
        client.post("/users/add/", {"username": "zoe"}),
        client.post(f"/users/{bob.pk}/deactivate/"),
        client.post(f"/users/{bob.pk}/password-link/"),
    ]
    if name in PLATFORM_ADMINS:
        assert answers == [200, 200, 200]
        assert [w.status_code for w in writes] == [302, 302, 302]
        assert User.objects.filter(username="zoe").exists()
        bob.refresh_from_db()
        assert not bob.is_active
    else:
        assert answers == [403, 403, 403]
        assert [w.status_code for w in writes] == [403, 403, 403]
        assert _state(bob) == before and not User.objects.filter(username="zoe").exists()


def test_the_sidebar_shows_users_to_platform_admins_only(teams):
    assert 'href="/users/"' in clients.page(teams.user("oscar")).get("/tenants/").content.decode()
    assert (
        'href="/users/"' not in clients.page(teams.user("erin")).get("/tenants/").content.decode()
    )


# --- the list -------------------------------------------------------------------------------


def _listed(response) -> set[str]:
    return set(re.findall(r'data-user="([^"]+)"', response.content.decode()))


def test_the_list_searches_names_and_e_mails_and_filters_by_state(teams):
    UserFactory(username="zed", first_name="Zhang", last_name="Wei", email="zw@corp.example",
                password=None, is_active=False)  # fmt: skip
    client = clients.page(teams.user("oscar"))
    assert _listed(client.get("/users/", {"q": "zhang"})) == {"zed"}
    assert _listed(client.get("/users/", {"q": "corp.example"})) == {"zed"}
    assert _listed(client.get("/users/", {"q": "zhang wei"})) == {"zed"}
    assert _listed(client.get("/users/", {"state": "inactive"})) == {"zed"}
    active = _listed(client.get("/users/", {"state": "active"}))
    assert "zed" not in active and {"alice", "bob", "erin", "oscar"} <= active
    assert "zed" in _listed(client.get("/users/"))


@pytest.mark.parametrize("query", [{"state": "maybe"}, {"q": "x" * 151}])
def test_a_bad_search_is_a_400(teams, query):
    response = clients.page(teams.user("oscar")).get("/users/", query)
    assert response.status_code == 400 and not _listed(response)


def test_service_accounts_are_neither_listed_nor_changed_here(teams):
    account = create_service_account(teams.user("erin"), tenant=teams.acme, name="ci")
    client, robot = clients.page(teams.user("oscar")), account.user
    assert robot.get_username() not in _listed(client.get("/users/"))
    assert client.get(f"/users/{robot.pk}/").status_code == 404
    assert client.post(f"/users/{robot.pk}/deactivate/").status_code == 404
    robot.refresh_from_db()
    assert robot.is_active


# --- making a user and their first password -----------------------------------------------


def test_a_platform_admin_makes_a_user_whose_link_is_shown_once(teams):
    client = clients.page(teams.user("oscar"))
    data = {"username": "zoe", "first_name": "Zoe", "last_name": "Li", "email": "zoe@Example.com"}
    response = client.post("/users/add/", data)
    zoe = User.objects.get(username="zoe")
    assert response.status_code == 302 and response["Location"] == f"/users/{zoe.pk}/"
    assert (zoe.get_full_name(), zoe.email) == ("Zoe Li", "zoe@example.com")
    assert not zoe.has_usable_password() and zoe.is_active
    entry = AuditEntry.objects.get(action="user.create")
    assert (entry.actor_name, entry.target_id, entry.tenant_id) == ("oscar", str(zoe.pk), None)
    assert entry.after == {"username": "zoe", "first_name": "Zoe", "last_name": "Li",
                           "email": "zoe@example.com", "is_active": True}  # fmt: skip
    first = client.get(response["Location"])
    link = shown_link(first.content.decode())
    assert link and link.startswith("http://testserver/accounts/set-password/")
    assert "no-store" in first["Cache-Control"]
    assert shown_link(client.get(response["Location"]).content.decode()) is None


def test_the_new_user_chooses_a_password_with_the_link_and_logs_in_with_it(teams):
    client = clients.page(teams.user("oscar"))
    client.post("/users/add/", {"username": "zoe"})
    zoe = User.objects.get(username="zoe")
    link = shown_link(client.get(f"/users/{zoe.pk}/").content.decode())
    set_password(link)
    zoe.refresh_from_db()
    assert zoe.has_usable_password() and zoe.check_password(NEW_PASSWORD)
    entry = AuditEntry.objects.get(action="user.password_set")
    assert entry.actor_name == "zoe" and entry.target_id == str(zoe.pk)
    assert "new_password1" not in str(entry.after) and NEW_PASSWORD not in str(entry.after)
    signed_in = log_in("zoe", NEW_PASSWORD)
    assert signed_in.get("/tenants/").status_code == 200
    # Used once: the link no longer works.
    again = Client().get(link, follow=True)
    assert 'id="invalid-link"' in again.content.decode()


def test_a_weak_password_is_refused_on_the_set_password_page(teams):
    zoe = accounts.create_user(teams.user("oscar"), username="zoe")
    browser = Client()
    form_url = browser.get(accounts.set_password_path(zoe))["Location"]
    response = browser.post(form_url, {"new_password1": "12345678", "new_password2": "12345678"})
    assert response.status_code == 200 and response.context["form"].errors
    zoe.refresh_from_db()
    assert not zoe.has_usable_password()


def test_a_link_does_not_work_for_a_deactivated_user(teams):
    oscar = teams.user("oscar")
    zoe = accounts.create_user(oscar, username="zoe")
    path = accounts.set_password_path(zoe)
    accounts.deactivate_user(zoe.pk, oscar)
    response = Client().get(path, follow=True)
    assert 'id="invalid-link"' in response.content.decode()
    zoe.refresh_from_db()
    assert not zoe.has_usable_password()


def test_a_forged_link_does_not_work(teams):
    zoe = accounts.create_user(teams.user("oscar"), username="zoe")
    forged = accounts.set_password_path(zoe).rstrip("/")[:-3] + "abc/"
    assert 'id="invalid-link"' in Client().get(forged, follow=True).content.decode()


@pytest.mark.parametrize(
    "bad, field",
    [({"username": ""}, "username"), ({"username": "bob"}, "username"),
     ({"username": "BOB"}, "username"), ({"username": "has space"}, "username"),
     ({"username": "x" * 151}, "username"), ({"username": "ok", "email": "not-mail"}, "email"),
     ({"username": "ok", "first_name": "x" * 151}, "first_name")],
)  # fmt: skip
def test_a_bad_user_is_a_field_error_and_changes_nothing(teams, bad, field):
    client = clients.page(teams.user("oscar"))
    before = _state()
    response = client.post("/users/add/", bad)
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert _state() == before


# --- deactivating and reactivating ---------------------------------------------------------


def test_deactivating_ends_sessions_and_refuses_logins_and_tokens_until_reactivated(teams):
    bob = teams.user("bob")  # conftest's bob has the password bob-pw-1
    session = log_in("bob", "bob-pw-1")
    _token, key = tokens.issue(bob, name="ci")
    api = clients.bearer(key)
    assert api.get("/api/v1/tenants/").status_code == 200
    admin = clients.page(teams.user("oscar"))
    assert admin.post(f"/users/{bob.pk}/deactivate/").status_code == 302
    entry = AuditEntry.objects.get(action="user.deactivate")
    assert entry.before["is_active"] is True and entry.after["is_active"] is False
    assert entry.actor_name == "oscar"
    # The open session ends, the password and the token are refused.
    ended = session.get("/tenants/")
    assert ended.status_code == 302 and ended["Location"].startswith("/accounts/login/")
    refused = Client().post("/accounts/login/", {"username": "bob", "password": "bob-pw-1"})
    assert refused.status_code == 200 and "_auth_user_id" not in refused.wsgi_request.session
    assert api.get("/api/v1/tenants/").status_code == 401
    # Still a member of acme: the history keeps its requester.
    assert bob.memberships.filter(tenant=teams.acme).exists()
    assert admin.post(f"/users/{bob.pk}/reactivate/").status_code == 302
    assert AuditEntry.objects.get(action="user.reactivate").after["is_active"] is True
    assert api.get("/api/v1/tenants/").status_code == 200
    log_in("bob", "bob-pw-1")


def test_nobody_deactivates_themselves(teams):
    client, oscar = clients.page(teams.user("oscar")), teams.user("oscar")
    page = client.get(f"/users/{oscar.pk}/").content.decode()
    assert f"/users/{oscar.pk}/deactivate/" not in page
    before = _state(oscar)
    response = client.post(f"/users/{oscar.pk}/deactivate/", follow=True)
    assert "You cannot deactivate yourself." in response.content.decode()
    assert _state(oscar) == before


def test_only_a_superuser_deactivates_a_superuser(teams):
    root = UserFactory(username="root", password=None, is_superuser=True)
    oscar = clients.page(teams.user("oscar"))  # signing in is audited: count what follows
    before = _state(root)
    assert oscar.post(f"/users/{root.pk}/deactivate/").status_code == 403
    assert _state(root) == before
    assert (
        clients.page(teams.user("alice")).post(f"/users/{root.pk}/deactivate/").status_code == 302
    )
    root.refresh_from_db()
    assert not root.is_active


def test_the_last_active_admin_of_a_tenant_is_not_deactivated(teams):
    client, erin = clients.page(teams.user("oscar")), teams.user("erin")
    before = _state(erin)
    response = client.post(f"/users/{erin.pk}/deactivate/", follow=True)
    assert "erin is the last admin of Acme" in response.content.decode()
    assert _state(erin) == before
    # With a second admin she may go; then that one is the last active admin.
    andy = teams.memberships["andy"]
    tenancy.change_role(andy.pk, teams.user("oscar"), role=Role.ADMIN)
    assert client.post(f"/users/{erin.pk}/deactivate/").status_code == 302
    erin.refresh_from_db()
    assert not erin.is_active
    roles = client.post(f"/tenants/acme/members/{andy.pk}/role/", {f"m{andy.pk}-role": "member"},
                        follow=True)  # fmt: skip
    assert "A tenant keeps at least one admin." in roles.content.decode()
    andy.refresh_from_db()
    assert andy.role == Role.ADMIN


def test_a_new_link_is_made_only_for_an_active_user_without_a_password(teams):
    client, oscar = clients.page(teams.user("oscar")), teams.user("oscar")
    zoe = accounts.create_user(oscar, username="zoe")
    response = client.post(f"/users/{zoe.pk}/password-link/")
    assert response.status_code == 302
    link = shown_link(client.get(f"/users/{zoe.pk}/").content.decode())
    assert link and AuditEntry.objects.filter(action="user.password_link").count() == 1
    assert link not in str(AuditEntry.objects.get(action="user.password_link").after)
    set_password(link)
    # Once they have a password, nobody else may set it.
    bob, entries = teams.user("bob"), AuditEntry.objects.count()
    for person in (zoe, bob):
        refused = client.post(f"/users/{person.pk}/password-link/", follow=True)
        assert "has set a password already" in refused.content.decode()
    assert AuditEntry.objects.count() == entries


def test_the_users_and_set_password_pages_speak_chinese(teams):
    client = Client(headers={"accept-language": "zh-hans"})
    client.force_login(teams.user("oscar"))
    body = client.get("/users/").content.decode()
    assert "添加用户" in body and "已停用" in body
    zoe = accounts.create_user(teams.user("oscar"), username="zoe")
    stranger = Client(headers={"accept-language": "zh-hans"})
    form = stranger.get(stranger.get(accounts.set_password_path(zoe))["Location"])
    assert "设置你的密码" in form.content.decode()
