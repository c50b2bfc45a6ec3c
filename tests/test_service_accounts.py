"""Tenant service accounts for CI: made by a tenant's admins, members of their tenant, with
tokens only (never a page), disabled for good; one tenant never reaching another's."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from audit.interface import AuditEntry
from quotas.choices import Role
from quotas.models import Membership
from tests import clients
from tests.api import error_fields
from tests.factories import gpu_team
from tests.tenants import ACTORS, PLATFORM_ADMINS, SEE_ACME, teams_fixture  # noqa: F401 (teams)
from tokens import interface, services
from tokens.models import ApiToken, ServiceAccount

pytestmark = pytest.mark.django_db

URL = "/api/v1/service-accounts/"
MANAGE_ACME = (*PLATFORM_ADMINS, "erin")


@pytest.fixture
def robots(teams):
    """A service account in each team, each with a live token."""
    acme = services.create_service_account(teams.user("erin"), tenant=teams.acme, name="acme-ci")
    bravo = services.create_service_account(teams.user("tom"), tenant=teams.bravo, name="bravo-ci")
    for account in (acme, bravo):
        services.issue_service_token(teams.user("alice"), account, name="pipeline")
    return {"acme": acme, "bravo": bravo}


def test_a_tenant_admin_makes_a_service_account_that_is_a_member_and_cannot_sign_in(teams):
    response = clients.api(teams.user("erin")).post(
        URL, {"tenant": teams.acme.pk, "name": "nightly", "description": "GitLab"}, format="json"
    )
    assert response.status_code == 201, response.content
    account = ServiceAccount.objects.get(pk=response.json()["id"])
    assert (account.tenant, account.name, account.created_by) == (teams.acme, "nightly",
                                                                  teams.user("erin"))  # fmt: skip
    assert response.json()["username"] == account.user.username and response.json()["active"]
    assert Membership.objects.get(user=account.user).role == Role.MEMBER
    assert not account.user.has_usable_password()
    entry = AuditEntry.objects.get(action="service_account.created")
    assert entry.tenant_id == teams.acme.pk and entry.actor == teams.user("erin")
    assert AuditEntry.objects.filter(action="membership.create", tenant_id=teams.acme.pk).exists()


def test_a_service_account_never_signs_in_to_pages_even_with_a_password(robots):
    user = robots["acme"].user
    user.set_password("a-password-1")
    user.save()
    client = Client()
    response = client.post("/accounts/login/", {"username": user.username,
                                                "password": "a-password-1"})  # fmt: skip
    assert response.status_code == 200 and "_auth_user_id" not in client.session
    # A session made for it some other way is no session either.
    client.force_login(user, backend="tokens.backends.PortalModelBackend")
    assert client.get("/account/").status_code == 302


@pytest.mark.parametrize("name", ACTORS)
def test_each_user_lists_the_service_accounts_of_the_tenants_they_see(teams, robots, name):
    response = clients.api(teams.user(name)).get(URL)
    assert response.status_code == 200
    listed = {item["name"] for item in response.json()["results"]}
    expected = set()
    if name in SEE_ACME:
        expected.add("acme-ci")
    if name in (*PLATFORM_ADMINS, "tom"):
        expected.add("bravo-ci")
    assert listed == expected


@pytest.mark.parametrize("name", ACTORS)
def test_each_user_manages_only_the_service_accounts_of_tenants_they_admin(teams, robots, name):
    account = robots["acme"]
    client = clients.api(teams.user(name))
    detail, tokens = f"{URL}{account.pk}/", f"{URL}{account.pk}/tokens/"
    token = ApiToken.objects.get(user=account.user)
    answers = {
        "read": client.get(detail).status_code,
        "tokens": client.get(tokens).status_code,
        "issue": client.post(tokens, {"name": "more"}, format="json").status_code,
        "revoke": client.delete(f"{tokens}{token.pk}/").status_code,
        "disable": client.delete(detail).status_code,
    }
    if name in MANAGE_ACME:
        assert answers == {"read": 200, "tokens": 200, "issue": 201, "revoke": 204,
                           "disable": 204}  # fmt: skip
        return
    if name in SEE_ACME:  # its members see it and manage nothing
        assert answers == {"read": 200, "tokens": 403, "issue": 403, "revoke": 403,
                           "disable": 403}  # fmt: skip
    else:  # another tenant's admin, or nobody's: it is not there
        assert set(answers.values()) == {404}
    account.refresh_from_db()
    token.refresh_from_db()
    assert account.disabled_at is None and token.revoked_at is None
    assert ApiToken.objects.filter(user=account.user).count() == 1


@pytest.mark.parametrize("name", [n for n in ACTORS if n not in MANAGE_ACME])
def test_only_acmes_admins_make_service_accounts_in_acme(teams, name):
    before = get_user_model().objects.count()
    response = clients.api(teams.user(name)).post(URL, {"tenant": teams.acme.pk, "name": "x"})
    if name in SEE_ACME:
        assert response.status_code == 403
    else:  # the tenant is not one they can name
        assert response.status_code == 400 and "tenant" in error_fields(response)
    assert not ServiceAccount.objects.exists() and get_user_model().objects.count() == before


@pytest.mark.parametrize(
    "data, field",
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 101}, "name"),
        ({"name": "acme-ci"}, "name"),  # taken in this tenant
        ({"name": "ok", "description": "x" * 2001}, "description"),
        ({"name": "ok", "tenant": 999_999}, "tenant"),
    ],
)
def test_bad_input_is_a_400_that_makes_nothing(teams, robots, data, field):
    users = get_user_model().objects.count()
    response = clients.api(teams.user("erin")).post(URL, {"tenant": teams.acme.pk, **data},
                                             format="json")  # fmt: skip
    assert response.status_code == 400 and field in error_fields(response)
    assert ServiceAccount.objects.count() == 2 and get_user_model().objects.count() == users


def test_the_key_is_shown_once_and_bad_token_input_makes_nothing(teams, robots):
    account, client = robots["acme"], clients.api(teams.user("erin"))
    url = f"{URL}{account.pk}/tokens/"
    for bad in ({"name": ""}, {"name": "x", "scope": "all"},
                {"name": "x", "expires_at": "2000-01-01T00:00:00Z"}):  # fmt: skip
        assert client.post(url, bad, format="json").status_code == 400
    response = client.post(url, {"name": "deploy", "scope": "read"}, format="json")
    assert response.status_code == 201
    key = response.json()["key"]
    assert key not in client.get(url).content.decode()
    assert ApiToken.objects.filter(user=account.user).count() == 2
    created = AuditEntry.objects.filter(action="api_token.created", tenant_id=teams.acme.pk)
    assert created.filter(actor=teams.user("erin")).count() == 1


def test_a_service_account_token_manages_no_tokens_and_no_accounts(teams, robots):
    account = robots["acme"]
    _token, key = services.issue_service_token(teams.user("erin"), account, name="ci")
    client = clients.bearer(key)
    assert client.get("/api/v1/tenants/").status_code == 200
    assert client.post("/api/v1/tokens/", {"name": "mine"}, format="json").status_code == 403
    mine = f"{URL}{account.pk}/tokens/"
    assert client.post(mine, {"name": "more"}, format="json").status_code == 403
    assert client.delete(f"{URL}{account.pk}/").status_code == 403
    # Even promoted to admin of its tenant, it manages no service account.
    Membership.objects.filter(user=account.user).update(role=Role.ADMIN)
    assert client.post(URL, {"tenant": teams.acme.pk, "name": "x"}).status_code == 403
    assert ApiToken.objects.filter(user=account.user).count() == 2
    assert ServiceAccount.objects.count() == 2


def test_disabling_revokes_every_token_and_keeps_the_account_listed(teams, robots):
    account = robots["acme"]
    _token, key = services.issue_service_token(teams.user("erin"), account, name="ci")
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 200
    assert clients.api(teams.user("erin")).delete(f"{URL}{account.pk}/").status_code == 204
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401
    account.refresh_from_db()
    assert account.disabled_at and not account.user.is_active
    assert not ApiToken.objects.filter(user=account.user, revoked_at__isnull=True).exists()
    listed = clients.api(teams.user("erin")).get(URL, {"active": "false"}).json()["results"]
    assert [item["id"] for item in listed] == [account.pk]
    response = clients.api(teams.user("erin")).post(f"{URL}{account.pk}/tokens/", {"name": "again"})
    assert response.status_code == 400
    assert AuditEntry.objects.filter(action="service_account.disabled").count() == 1
    # Disabling again changes nothing.
    assert clients.api(teams.user("erin")).delete(f"{URL}{account.pk}/").status_code == 204
    assert AuditEntry.objects.filter(action="service_account.disabled").count() == 1


def test_a_service_account_token_drives_a_gpu_request_through_the_api(
    django_capture_on_commit_callbacks,
):
    team = gpu_team("ci")
    account = services.create_service_account(team.admin, tenant=team.tenant, name="runner")
    _token, key = services.issue_service_token(team.admin, account, name="gitlab")
    robot = clients.bearer(key)
    ask = {"tenant": team.tenant.pk, "pool": team.pool.pk, "count": 1, "compute_pct": 25,
           "memory_mib": 8192, "duration_hours": 1, "reason": "ci job"}  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        created = robot.post("/api/v1/gpu-requests/", ask, format="json")
    assert created.status_code == 201, created.content
    url = f"/api/v1/gpu-requests/{created.json()['id']}/"
    with django_capture_on_commit_callbacks(execute=True):
        approved = clients.api(team.approver).post(
            f"{url}approve/", {"comment": "ok"}, format="json"
        )
    assert approved.status_code == 200
    got = robot.get(url).json()
    assert got["state"] == "allocated" and len(got["allocations"]) == 1
    with django_capture_on_commit_callbacks(execute=True):
        released = robot.post(f"{url}release/")
    assert released.status_code == 200 and released.json()["state"] == "released"


def test_a_read_token_of_a_service_account_asks_for_nothing():
    team = gpu_team("ro")
    account = services.create_service_account(team.admin, tenant=team.tenant, name="watcher")
    _token, key = services.issue_service_token(team.admin, account, name="dash", scope="read")
    ask = {"tenant": team.tenant.pk, "pool": team.pool.pk, "count": 1, "compute_pct": 25,
           "memory_mib": 8192, "duration_hours": 1, "reason": "x"}  # fmt: skip
    assert clients.bearer(key).post("/api/v1/gpu-requests/", ask, format="json").status_code == 403
    assert clients.bearer(key).get("/api/v1/gpu-requests/").status_code == 200


def test_revoking_one_service_token_leaves_the_others(teams, robots):
    account = robots["acme"]
    token, key = services.issue_service_token(teams.user("erin"), account, name="a")
    _other, other_key = services.issue_service_token(teams.user("erin"), account, name="b")
    url = f"{URL}{account.pk}/tokens/{token.pk}/"
    assert clients.api(teams.user("erin")).delete(url).status_code == 204
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401
    assert clients.bearer(other_key).get("/api/v1/nodes/").status_code == 200
    # A personal token's id under a service account is not one of its tokens.
    personal, _ = interface.issue(teams.user("erin"), name="mine")
    assert (
        clients.api(teams.user("erin"))
        .delete(f"{URL}{account.pk}/tokens/{personal.pk}/")
        .status_code
        == 404
    )
