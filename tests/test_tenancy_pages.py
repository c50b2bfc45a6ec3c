"""The tenant pages: each role allowed and refused on each page; one team never sees or
touches another's members, quotas or usage; bad quotas and the last admin are refused."""

from __future__ import annotations

import re

import pytest

from audit.interface import AuditEntry
from quotas.choices import Role
from quotas.models import Membership, Quota, Tenant
from tests import clients
from tests.tenants import (
    ACTORS,
    BRAVO_SECRET,
    MANAGE_ACME_MEMBERS,
    PLATFORM_ADMINS,
    SEE_ACME,
    memberships_of,
    teams_fixture,  # noqa: F401 (the teams fixture)
)

pytestmark = pytest.mark.django_db


def _quota_row(quota: Quota) -> dict:
    return Quota.objects.filter(pk=quota.pk).values().get()


# --- reading --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTORS)
def test_the_tenant_list_shows_each_user_only_the_tenants_they_may_see(teams, name):
    response = clients.page(teams.user(name)).get("/tenants/")
    assert response.status_code == 200
    body = response.content.decode()
    assert ("Acme" in body) == (name in SEE_ACME)
    assert (BRAVO_SECRET in body) == (name in (*PLATFORM_ADMINS, "tom"))
    assert 'href="/tenants/"' in body  # the sidebar's Tenants item
    assert "style=" not in body  # bars get their widths from the page's script


def test_the_tenant_list_sends_anonymous_visitors_to_log_in(teams):
    response = clients.page(teams.user(None)).get("/tenants/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_tenant_list_shows_usage_bars_per_pool(teams):
    body = clients.page(teams.user("alice")).get("/tenants/").content.decode()
    # acme's 50 % slice and bravo's whole card, against guarantees of 400 and limits of 800.
    assert 'data-width="6.2"' in body and 'data-width="12.5"' in body
    assert "usage_bars.js" in body


@pytest.mark.parametrize("name", ACTORS)
def test_a_tenants_page_is_404_to_anyone_outside_it(teams, name):
    response = clients.page(teams.user(name)).get("/tenants/acme/")
    if name in SEE_ACME:
        assert response.status_code == 200
        body = response.content.decode()
        assert "erin" in body and "shared-pool" in body
        assert "bella" not in body and BRAVO_SECRET not in body
    else:
        assert response.status_code == 404
        assert "Acme" not in response.content.decode()


def test_a_member_never_reaches_another_tenants_page(teams):
    response = clients.page(teams.user("bob")).get("/tenants/bravo/")
    assert response.status_code == 404
    assert BRAVO_SECRET not in response.content.decode()
    assert "bella" not in response.content.decode()


def test_a_tenants_page_shows_each_members_usage(teams):
    body = clients.page(teams.user("bob")).get("/tenants/acme/").content.decode()
    # bob's 50 % slice for two hours: 1 GPU-hour (to the second it ran).
    assert "member-usage" in body and ">bob<" in body


# --- tenants and quotas: platform admins ----------------------------------------------------


@pytest.mark.parametrize("name", ACTORS)
def test_only_platform_admins_create_tenants(teams, name):
    client = clients.page(teams.user(name))
    get = client.get("/tenants/add/")
    response = client.post("/tenants/add/", {"name": "Zeta", "slug": "zeta", "admin": "dave"})
    if name in PLATFORM_ADMINS:
        assert get.status_code == 200 and response.status_code == 302
        tenant = Tenant.objects.get(slug="zeta")
        entry = AuditEntry.objects.get(action="tenant.create")
        assert entry.tenant_id == tenant.pk and entry.actor_name == name
        assert entry.address == "127.0.0.1"
        # Made with its first admin, in the same step.
        assert memberships_of(tenant) == [(teams.user("dave").pk, Role.ADMIN)]
        assert AuditEntry.objects.get(action="membership.create").tenant_id == tenant.pk
    else:
        assert get.status_code == 403 and response.status_code == 403
        assert not Tenant.objects.filter(slug="zeta").exists()


@pytest.mark.parametrize("name", ACTORS)
def test_only_platform_admins_edit_a_tenant(teams, name):
    response = clients.page(teams.user(name)).post(
        "/tenants/acme/edit/", {"name": "Acme 2", "slug": "acme"}
    )
    teams.acme.refresh_from_db()
    if name in PLATFORM_ADMINS:
        assert response.status_code == 302 and teams.acme.name == "Acme 2"
    else:
        assert response.status_code == (403 if name in SEE_ACME else 404)
        assert teams.acme.name == "Acme"


def _quota_form(**overrides) -> dict:
    data = {
        "guaranteed_vgpus": 1, "limit_vgpus": 2, "guaranteed_compute_pct": 50,
        "limit_compute_pct": 200, "guaranteed_memory_mib": 1, "limit_memory_mib": 4,
        "guaranteed_gpu_hours": 0, "limit_gpu_hours": 10, "budget_period": "month",
        "auto_approve_vgpus": 0, "auto_approve_compute_pct": 0, "auto_approve_hours": 0,
        "escalate_after_hours": 4, "expire_pending_after_hours": 72,
    }  # fmt: skip
    data.update(overrides)
    return data


@pytest.mark.parametrize("name", ACTORS)
def test_only_platform_admins_set_quotas(teams, name):
    before = _quota_row(teams.acme_quota)
    url = f"/tenants/acme/quotas/{teams.acme_quota.pk}/edit/"
    response = clients.page(teams.user(name)).post(url, _quota_form(limit_vgpus=3))
    if name in PLATFORM_ADMINS:
        assert response.status_code == 302
        assert _quota_row(teams.acme_quota)["limit_vgpus"] == 3
        entry = AuditEntry.objects.get(action="quota.update")
        assert entry.tenant_id == teams.acme.pk and entry.before["limit_vgpus"] == 8
    else:
        assert response.status_code == (403 if name in SEE_ACME else 404)
        assert _quota_row(teams.acme_quota) == before


@pytest.mark.parametrize(("language", "label"), [("en", "vGPU limit"), ("zh-hans", "vGPU 上限")])
def test_the_quota_form_keeps_the_small_v_of_vgpu(teams, language, label):
    url = f"/tenants/acme/quotas/{teams.acme_quota.pk}/edit/"
    page = clients.page(teams.user("alice")).get(url, HTTP_ACCEPT_LANGUAGE=language)
    text = page.content.decode()
    assert re.search(rf"<label[^>]*>\s*{label}", text), label
    assert "VGPU" not in text


def test_a_quota_of_another_tenant_is_404_under_this_tenants_address(teams):
    url = f"/tenants/acme/quotas/{teams.bravo_quota.pk}/edit/"
    assert clients.page(teams.user("alice")).get(url).status_code == 404


@pytest.mark.parametrize(
    "bad",
    [
        {"guaranteed_vgpus": 5, "limit_vgpus": 2},
        {"limit_memory_mib": -1},
        {"limit_vgpus": "many"},
        {"user_limit_vgpus": 3, "limit_vgpus": 2},
        {"auto_approve_compute_pct": 101},
    ],
)
def test_a_bad_quota_is_refused_on_its_field_and_changes_nothing(teams, bad):
    client = clients.page(teams.user("alice"))  # signing in is audited: count what follows
    before, entries = _quota_row(teams.acme_quota), AuditEntry.objects.count()
    url = f"/tenants/acme/quotas/{teams.acme_quota.pk}/edit/"
    response = client.post(url, _quota_form(**bad))
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert next(iter(bad)) in errors, errors
    assert _quota_row(teams.acme_quota) == before and AuditEntry.objects.count() == entries


def test_a_platform_admin_opens_a_pool_to_a_tenant_and_closes_it(teams):
    from tests.factories import PoolFactory

    other = PoolFactory(name="other-pool")
    client = clients.page(teams.user("oscar"))
    response = client.post("/tenants/acme/quotas/add/", _quota_form(pool=other.pk))
    assert response.status_code == 302
    quota = Quota.objects.get(tenant=teams.acme, pool=other)
    assert (
        clients.page(teams.user("erin"))
        .post(f"/tenants/acme/quotas/{quota.pk}/delete/")
        .status_code
        == 403
    )
    assert client.post(f"/tenants/acme/quotas/{quota.pk}/delete/").status_code == 302
    assert not Quota.objects.filter(pk=quota.pk).exists()
    assert AuditEntry.objects.filter(action="quota.delete", tenant_id=teams.acme.pk).exists()


# --- members: tenant admins ------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTORS)
def test_only_the_tenants_admins_manage_its_members(teams, name):
    client = clients.page(teams.user(name))
    before = memberships_of(teams.acme)
    page = client.get("/tenants/acme/members/")
    added = client.post("/tenants/acme/members/", {"username": "dave", "role": "member"})
    expected = 403 if name in SEE_ACME else 404
    if name in MANAGE_ACME_MEMBERS:
        assert page.status_code == 200 and added.status_code == 302
        assert Membership.objects.filter(tenant=teams.acme, user__username="dave").exists()
        entry = AuditEntry.objects.get(action="membership.create")
        assert entry.tenant_id == teams.acme.pk and entry.actor_name == name
    else:
        assert page.status_code == expected and added.status_code == expected
        assert memberships_of(teams.acme) == before


@pytest.mark.parametrize("name", ACTORS)
def test_only_the_tenants_admins_change_roles(teams, name):
    bob = teams.memberships["bob"]
    url = f"/tenants/acme/members/{bob.pk}/role/"
    response = clients.page(teams.user(name)).post(url, {f"m{bob.pk}-role": "approver"})
    bob.refresh_from_db()
    if name in MANAGE_ACME_MEMBERS:
        assert response.status_code == 302 and bob.role == Role.APPROVER
    else:
        assert response.status_code == (403 if name in SEE_ACME else 404)
        assert bob.role == Role.MEMBER


@pytest.mark.parametrize("name", ACTORS)
def test_only_the_tenants_admins_remove_members(teams, name):
    bob = teams.memberships["bob"]
    response = clients.page(teams.user(name)).post(f"/tenants/acme/members/{bob.pk}/remove/")
    gone = not Membership.objects.filter(pk=bob.pk).exists()
    if name in MANAGE_ACME_MEMBERS:
        assert response.status_code == 302 and gone
        assert AuditEntry.objects.filter(action="membership.delete").get().tenant_id == (
            teams.acme.pk
        )
    else:
        assert response.status_code == (403 if name in SEE_ACME else 404) and not gone


def test_an_admin_of_one_tenant_cannot_reach_anothers_members_through_their_own(teams):
    bella = teams.memberships["bella"]
    client = clients.page(teams.user("erin"))
    assert client.post(f"/tenants/acme/members/{bella.pk}/remove/").status_code == 404
    assert client.post(f"/tenants/bravo/members/{bella.pk}/remove/").status_code == 404
    assert Membership.objects.filter(pk=bella.pk).exists()


def test_the_last_admin_can_be_neither_removed_nor_demoted(teams):
    erin = teams.memberships["erin"]
    client, entries = clients.page(teams.user("erin")), AuditEntry.objects.count()
    response = client.post(f"/tenants/acme/members/{erin.pk}/remove/", follow=True)
    assert "at least one admin" in response.content.decode()
    client.post(f"/tenants/acme/members/{erin.pk}/role/", {f"m{erin.pk}-role": "member"})
    erin.refresh_from_db()
    assert erin.role == Role.ADMIN and AuditEntry.objects.count() == entries
    # With a second admin, the first may step down.
    client.post(f"/tenants/acme/members/{teams.memberships['andy'].pk}/role/",
                {f"m{teams.memberships['andy'].pk}-role": "admin"})  # fmt: skip
    client.post(f"/tenants/acme/members/{erin.pk}/role/", {f"m{erin.pk}-role": "member"})
    erin.refresh_from_db()
    assert erin.role == Role.MEMBER


def test_adding_an_unknown_user_is_a_field_error_that_changes_nothing(teams):
    before = memberships_of(teams.acme)
    response = clients.page(teams.user("erin")).post(
        "/tenants/acme/members/", {"username": "nobody-here", "role": "member"}
    )
    assert response.status_code == 200 and "username" in response.context["form"].errors
    assert memberships_of(teams.acme) == before


def test_the_admin_lists_and_edits_tenants_with_their_members_and_quotas(teams):
    client = clients.page(teams.user("alice"))
    urls = [
        "/admin/quotas/tenant/",
        f"/admin/quotas/tenant/{teams.acme.pk}/change/",
        "/admin/quotas/quota/",
        f"/admin/quotas/quota/{teams.acme_quota.pk}/change/",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 200, url
    body = client.get(f"/admin/quotas/tenant/{teams.acme.pk}/change/").content.decode()
    assert "erin" in body and "shared-pool" in body
