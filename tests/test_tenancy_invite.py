"""Inviting people to a tenant and creating a tenant with its first admin, on the pages and
the API: an existing user or one made in the same form (their set-password link shown
once, and it works); refused to those who may not, with nothing changed; a tenant keeps an
active admin from its creation on."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from audit.interface import AuditEntry
from quotas.choices import Role
from quotas.models import Membership, Tenant
from quotas.tenancy import accounts
from quotas.tenancy import services as tenancy
from tests import clients
from tests.api import error_fields
from tests.factories import TenantFactory, UserFactory
from tests.tenants import (
    ACTORS,
    MANAGE_ACME_MEMBERS,
    PLATFORM_ADMINS,
    SEE_ACME,
    memberships_of,
    teams_fixture,  # noqa: F401 (the teams fixture)
)
from tests.test_users_pages import NEW_PASSWORD, log_in, set_password, shown_link
from tokens.services import create_service_account

pytestmark = pytest.mark.django_db
User = get_user_model()
NINA = {"username": "nina", "new_user": "on", "first_name": "Nina", "last_name": "Zhao",
        "email": "nina@example.com", "role": "member"}  # fmt: skip


def _counts() -> tuple[int, int, int, int]:
    return (User.objects.count(), Membership.objects.count(), Tenant.objects.count(),
            AuditEntry.objects.count())  # fmt: skip


# --- inviting to a tenant -------------------------------------------------------------------


def test_a_tenant_admin_invites_a_new_user_who_signs_in_with_the_link_shown(teams):
    client = clients.page(teams.user("erin"))
    response = client.post("/tenants/acme/members/", NINA)
    assert response.status_code == 302 and response["Location"] == "/tenants/acme/members/"
    nina = User.objects.get(username="nina")
    assert (nina.get_full_name(), nina.email) == ("Nina Zhao", "nina@example.com")
    assert memberships_of(teams.acme)[-1] == (nina.pk, Role.MEMBER)
    made = AuditEntry.objects.get(action="user.create")
    assert made.actor_name == "erin" and made.tenant_id == teams.acme.pk
    joined = AuditEntry.objects.get(action="membership.create")
    assert joined.tenant_id == teams.acme.pk and joined.after["user_id"] == nina.pk
    page = client.get("/tenants/acme/members/")
    link = shown_link(page.content.decode())
    assert link and 'data-member="nina"' in page.content.decode()
    assert shown_link(client.get("/tenants/acme/members/").content.decode()) is None
    set_password(link)
    nina_client = log_in("nina", NEW_PASSWORD)
    assert nina_client.get("/tenants/acme/").status_code == 200


def test_a_platform_admin_invites_an_existing_user_with_a_role(teams):
    response = clients.page(teams.user("oscar")).post(
        "/tenants/acme/members/", {"username": "dave", "role": "approver"}
    )
    assert response.status_code == 302
    dave = teams.user("dave")
    assert Membership.objects.get(tenant=teams.acme, user=dave).role == Role.APPROVER
    assert not AuditEntry.objects.filter(action="user.create").exists()


@pytest.mark.parametrize("name", ACTORS)
def test_only_the_tenants_admins_and_platform_admins_invite_new_users(teams, name):
    client = clients.page(teams.user(name))
    before = _counts()
    response = client.post("/tenants/acme/members/", NINA)
    if name in MANAGE_ACME_MEMBERS:
        assert response.status_code == 302
        assert Membership.objects.filter(tenant=teams.acme, user__username="nina").exists()
    else:
        assert response.status_code == (403 if name in SEE_ACME else 404)
        assert _counts() == before


def test_another_tenants_admin_cannot_invite_into_acme(teams):
    client = clients.page(teams.user("tom"))
    before = _counts()
    assert client.post("/tenants/acme/members/", NINA).status_code == 404
    assert _counts() == before


@pytest.mark.parametrize(
    "bad, field",
    [({"username": "bob"}, "username"), ({"username": "Bob"}, "username"),
     ({"username": "has space"}, "username"), ({"email": "nope"}, "email"),
     ({"role": "boss"}, "role"), ({"username": ""}, "username"),
     ({"new_user": "", "username": "nobody-here"}, "username")],
)  # fmt: skip
def test_a_bad_invitation_is_a_field_error_and_changes_nothing(teams, bad, field):
    client = clients.page(teams.user("erin"))
    before = _counts()
    response = client.post("/tenants/acme/members/", {**NINA, **bad})
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert _counts() == before


def test_the_new_user_fields_count_only_when_the_box_is_ticked(teams):
    client = clients.page(teams.user("erin"))
    response = client.post(
        "/tenants/acme/members/",
        {"username": "dave", "first_name": "Ignored", "email": "bad-but-ignored", "role": "member"},
    )
    # The e-mail field still checks its form; without the box nothing is made of it.
    assert response.status_code == 200 and "email" in response.context["form"].errors
    response = client.post(
        "/tenants/acme/members/", {"username": "dave", "first_name": "Ignored", "role": "member"}
    )
    assert response.status_code == 302
    assert teams.user("dave").first_name == ""


# --- creating a tenant with its first admin -------------------------------------------------


def test_a_tenant_is_created_with_a_new_first_admin_whose_link_is_shown_once(teams):
    client = clients.page(teams.user("oscar"))
    data = {"name": "Zeta", "slug": "zeta", "admin": "zack", "new_user": "on",
            "email": "zack@example.com"}  # fmt: skip
    response = client.post("/tenants/add/", data)
    assert response.status_code == 302 and response["Location"] == "/tenants/zeta/"
    zeta, zack = Tenant.objects.get(slug="zeta"), User.objects.get(username="zack")
    assert memberships_of(zeta) == [(zack.pk, Role.ADMIN)]
    actions = list(
        AuditEntry.objects.filter(tenant_id=zeta.pk).order_by("id").values_list("action", flat=True)
    )
    assert actions == ["tenant.create", "user.create", "membership.create"]
    page = client.get("/tenants/zeta/").content.decode()
    link = shown_link(page)
    assert link and shown_link(client.get("/tenants/zeta/").content.decode()) is None
    set_password(link)
    zack_client = log_in("zack", NEW_PASSWORD)
    assert zack_client.get("/tenants/zeta/members/").status_code == 200  # he manages it


def test_a_tenant_is_created_with_an_existing_first_admin(teams):
    response = clients.page(teams.user("alice")).post(
        "/tenants/add/", {"name": "Zeta", "slug": "zeta", "admin": "bob"}
    )
    assert response.status_code == 302
    zeta = Tenant.objects.get(slug="zeta")
    assert memberships_of(zeta) == [(teams.user("bob").pk, Role.ADMIN)]
    assert (
        shown_link(clients.page(teams.user("alice")).get("/tenants/zeta/").content.decode()) is None
    )


@pytest.mark.parametrize(
    "admin, field",
    [({"admin": ""}, "admin"), ({"admin": "nobody-here"}, "admin"),
     ({"admin": "gone"}, "admin"), ({"admin": "bob", "new_user": "on"}, "admin"),
     ({"admin": "new one", "new_user": "on"}, "admin"),
     ({"admin": "zack", "new_user": "on", "email": "x"}, "email"),
     ({"admin": "bob", "slug": "acme"}, "slug")],
)  # fmt: skip
def test_a_tenant_without_a_usable_first_admin_is_refused_and_nothing_changes(teams, admin, field):
    UserFactory(username="gone", password=None, is_active=False)
    client = clients.page(teams.user("oscar"))
    before = _counts()
    response = client.post("/tenants/add/", {"name": "Zeta", "slug": "zeta", **admin})
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert _counts() == before


def test_a_service_account_cannot_be_a_tenants_first_admin(teams):
    robot = create_service_account(teams.user("erin"), tenant=teams.acme, name="ci").user
    client = clients.page(teams.user("oscar"))
    before = _counts()
    response = client.post("/tenants/add/", {"name": "Zeta", "slug": "zeta",
                                             "admin": robot.get_username()})  # fmt: skip
    assert response.status_code == 200 and "admin" in response.context["form"].errors
    assert _counts() == before


def test_the_api_creates_a_tenant_with_its_first_admin_only(teams):
    client = clients.api(teams.user("oscar"))
    created = client.post("/api/v1/tenants/", {"name": "Zeta", "slug": "zeta", "admin": "bob"},
                          format="json")  # fmt: skip
    assert created.status_code == 201, created.content
    assert "admin" not in created.json()  # said once, then it is a membership
    zeta = Tenant.objects.get(slug="zeta")
    assert memberships_of(zeta) == [(teams.user("bob").pk, Role.ADMIN)]
    before = _counts()
    changed = client.patch(f"/api/v1/tenants/{zeta.pk}/", {"admin": "dave"}, format="json")
    assert changed.status_code == 400 and set(error_fields(changed)) == {"admin"}
    assert _counts() == before


# --- a tenant keeps an active admin ---------------------------------------------------------


def test_a_deactivated_admin_does_not_count_as_the_tenants_admin(teams):
    oscar, erin = teams.user("oscar"), teams.memberships["erin"]
    tenancy.change_role(teams.memberships["andy"].pk, oscar, role=Role.ADMIN)
    andy = teams.memberships["andy"]
    accounts.deactivate_user(andy.user_id, oscar)
    api, page = clients.api(teams.user("erin")), clients.page(teams.user("oscar"))
    entries = AuditEntry.objects.count()
    demoted = api.patch(f"/api/v1/memberships/{erin.pk}/", {"role": "member"}, format="json")
    assert demoted.status_code == 400 and "role" in error_fields(demoted)
    assert demoted.json()["error"]["fields"]["role"] == ["A tenant keeps at least one admin."]
    removed = page.post(f"/tenants/acme/members/{erin.pk}/remove/", follow=True)
    assert "A tenant keeps at least one admin." in removed.content.decode()
    erin.refresh_from_db()
    assert erin.role == Role.ADMIN and AuditEntry.objects.count() == entries


def test_a_tenant_from_before_with_no_admin_is_told_and_a_platform_admin_adds_one(teams):
    # Tenants made before the rule may have no admin: nothing breaks, the page says so.
    old = TenantFactory(name="Old", slug="old")
    client = clients.page(teams.user("oscar"))
    assert "has no admin" in client.get("/tenants/old/").content.decode()
    assert "has no admin" in client.get("/tenants/old/members/").content.decode()
    response = client.post("/tenants/old/members/", {"username": "bob", "role": "admin"})
    assert response.status_code == 302
    assert memberships_of(old) == [(teams.user("bob").pk, Role.ADMIN)]
    assert "has no admin" not in client.get("/tenants/old/").content.decode()


@pytest.mark.parametrize("name", PLATFORM_ADMINS)
def test_a_platform_admin_sees_the_new_admin_form_fields(teams, name):
    body = clients.page(teams.user(name)).get("/tenants/add/").content.decode()
    for field in ("id_admin", "id_new_user", "id_first_name", "id_email"):
        assert f'id="{field}"' in body
    assert "new_user.js" in body
