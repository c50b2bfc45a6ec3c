"""/api/v1/users/: platform admins make, list, deactivate and reactivate users; the
answers and what they change. Who gets which status is the role matrix's
(tests/test_api_role_matrix.py); here is what a status does not show."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from audit.interface import AuditEntry
from tests import clients
from tests.api import error_fields
from tests.factories import UserFactory
from tests.tenants import teams_fixture  # noqa: F401 (the teams fixture)
from tests.test_users_pages import NEW_PASSWORD, log_in, set_password
from tokens import interface as tokens
from tokens.services import create_service_account

pytestmark = pytest.mark.django_db
User = get_user_model()
USERS = "/api/v1/users/"


def _state() -> tuple[int, int, list]:
    return (User.objects.count(), AuditEntry.objects.count(),
            list(User.objects.order_by("pk").values_list("is_active", "password")))  # fmt: skip


def test_a_new_user_comes_with_a_set_password_link_that_works_once(teams):
    response = clients.api(teams.user("oscar")).post(
        USERS, {"username": "zoe", "email": "zoe@example.com", "first_name": "Zoe"}, format="json"
    )
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["username"] == "zoe" and data["is_active"] is True
    assert data["password_chosen"] is False and "password" not in data
    assert data["password_link"].startswith("http://testserver/accounts/set-password/")
    entry = AuditEntry.objects.get(action="user.create")
    assert entry.actor_name == "oscar" and entry.after["email"] == "zoe@example.com"
    set_password(data["password_link"])
    log_in("zoe", NEW_PASSWORD)
    read = clients.api(teams.user("oscar")).get(f"{USERS}{data['id']}/").json()
    assert read["password_chosen"] is True and "password_link" not in read


@pytest.mark.parametrize(
    "bad, field",
    [({"username": ""}, "username"), ({"username": "bob"}, "username"),
     ({"username": "BOB"}, "username"), ({"username": "a b"}, "username"),
     ({"username": "x" * 151}, "username"), ({"email": "nope"}, "email"),
     ({"last_name": "x" * 151}, "last_name"), ({"username": None}, "username")],
)  # fmt: skip
def test_a_bad_user_is_400_on_its_field_and_changes_nothing(teams, bad, field):
    client = clients.api(teams.user("oscar"))
    before = _state()
    response = client.post(USERS, {"username": "zoe", **bad}, format="json")
    assert response.status_code == 400, response.content
    assert set(error_fields(response)) == {field}
    assert _state() == before


def test_is_active_is_not_set_by_the_caller(teams):
    response = clients.api(teams.user("oscar")).post(
        USERS, {"username": "zoe", "is_active": False}, format="json"
    )
    assert response.status_code == 201 and User.objects.get(username="zoe").is_active


def test_the_list_filters_by_words_and_state_and_leaves_service_accounts_out(teams):
    UserFactory(username="zed", first_name="Zhang", password=None, is_active=False)
    robot = create_service_account(teams.user("erin"), tenant=teams.acme, name="ci").user
    client = clients.api(teams.user("oscar"))

    def names(**query) -> set[str]:
        response = client.get(USERS, query)
        assert response.status_code == 200, response.content
        return {row["username"] for row in response.json()["results"]}

    assert names(search="zhang") == {"zed"}
    assert names(is_active="false") == {"zed"}
    assert "zed" not in names(is_active="true")
    assert robot.get_username() not in names()
    assert names(username="bob") == {"bob"}
    assert client.get(f"{USERS}{robot.pk}/").status_code == 404
    assert client.get(USERS, {"is_active": "maybe"}).status_code == 400


def test_deactivating_refuses_the_users_tokens_until_reactivated(teams):
    bob = teams.user("bob")
    _token, key = tokens.issue(bob, name="ci")
    assert clients.bearer(key).get("/api/v1/tenants/").status_code == 200
    admin = clients.api(teams.user("oscar"))
    response = admin.post(f"{USERS}{bob.pk}/deactivate/")
    assert response.status_code == 200 and response.json()["is_active"] is False
    refused = clients.bearer(key).get("/api/v1/tenants/")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "authentication_failed"
    # Asking again changes nothing and records nothing.
    entries = AuditEntry.objects.count()
    assert admin.post(f"{USERS}{bob.pk}/deactivate/").status_code == 200
    assert AuditEntry.objects.count() == entries
    assert admin.post(f"{USERS}{bob.pk}/reactivate/").json()["is_active"] is True
    assert clients.bearer(key).get("/api/v1/tenants/").status_code == 200


def test_refused_deactivations_are_explained_and_change_nothing(teams):
    root = UserFactory(username="root", password=None, is_superuser=True)
    oscar, erin = teams.user("oscar"), teams.user("erin")
    client = clients.api(teams.user("oscar"))
    before = _state()
    itself = client.post(f"{USERS}{oscar.pk}/deactivate/")
    assert itself.status_code == 400 and error_fields(itself) == {
        "user": ["You cannot deactivate yourself."]
    }
    last = client.post(f"{USERS}{erin.pk}/deactivate/")
    assert last.status_code == 400 and "last admin of Acme" in error_fields(last)["user"][0]
    superuser = client.post(f"{USERS}{root.pk}/deactivate/")
    assert superuser.status_code == 403
    assert superuser.json()["error"]["message"] == "Only a superuser may change a superuser."
    assert _state() == before


def test_a_new_link_only_until_the_user_has_chosen_a_password(teams):
    zoe = clients.api(teams.user("oscar")).post(USERS, {"username": "zoe"}, format="json").json()
    client = clients.api(teams.user("oscar"))
    link = client.post(f"{USERS}{zoe['id']}/password-link/")
    assert link.status_code == 200 and "/accounts/set-password/" in link.json()["password_link"]
    assert AuditEntry.objects.filter(action="user.password_link").count() == 1
    set_password(link.json()["password_link"])
    refused = client.post(f"{USERS}{zoe['id']}/password-link/")
    assert refused.status_code == 400 and "user" in error_fields(refused)
    bob = client.post(f"{USERS}{teams.user('bob').pk}/password-link/")
    assert bob.status_code == 400
    assert AuditEntry.objects.filter(action="user.password_link").count() == 1
