"""/api/v1/tenants/, /memberships/, /quotas/ and a tenant's usage: the same rules as the
pages, field-level 400s that change nothing, one team never reaching another's."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from audit.interface import AuditEntry
from quotas.choices import Role
from quotas.models import Membership, Quota, Tenant
from tests import clients
from tests.api import ANONYMOUS_REFUSED, error_fields
from tests.factories import PoolFactory, held_allocation
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


def _ids(response) -> set[int]:
    return {item["id"] for item in response.json()["results"]}


def _quota_row(quota: Quota) -> dict:
    return Quota.objects.filter(pk=quota.pk).values().get()


URLS = ["/api/v1/tenants/", "/api/v1/memberships/", "/api/v1/quotas/"]


@pytest.mark.parametrize("url", URLS)
def test_anonymous_callers_are_refused_everywhere(teams, url):
    assert clients.api(teams.user(None)).get(url).status_code in ANONYMOUS_REFUSED
    assert clients.api(teams.user(None)).post(url, {}).status_code in ANONYMOUS_REFUSED


@pytest.mark.parametrize("name", ACTORS)
def test_each_user_lists_only_the_tenants_they_may_see(teams, name):
    response = clients.api(teams.user(name)).get("/api/v1/tenants/")
    assert response.status_code == 200
    expected = set()
    if name in SEE_ACME:
        expected.add(teams.acme.pk)
    if name in (*PLATFORM_ADMINS, "tom"):
        expected.add(teams.bravo.pk)
    assert _ids(response) == expected


@pytest.mark.parametrize("name", ACTORS)
def test_each_user_lists_only_the_members_and_quotas_of_their_tenants(teams, name):
    client = clients.api(teams.user(name))
    members, quotas = client.get("/api/v1/memberships/"), client.get("/api/v1/quotas/")
    tenants = {m["tenant"] for m in members.json()["results"]}
    tenants |= {q["tenant"] for q in quotas.json()["results"]}
    if name in PLATFORM_ADMINS:
        assert tenants == {teams.acme.pk, teams.bravo.pk}
    elif name in SEE_ACME:
        assert tenants == {teams.acme.pk}
        assert "bella" not in members.content.decode()
    elif name == "tom":
        assert tenants == {teams.bravo.pk}
    else:
        assert tenants == set()


def test_filtering_on_another_tenant_gives_nothing_rather_than_an_error(teams):
    client = clients.api(teams.user("bob"))
    for url in ("/api/v1/memberships/", "/api/v1/quotas/"):
        response = client.get(url, {"tenant": teams.bravo.pk})
        assert response.status_code == 200 and response.json()["results"] == []
    assert client.get("/api/v1/memberships/", {"role": "boss"}).status_code == 400


@pytest.mark.parametrize("name", ACTORS)
def test_another_tenant_its_members_quotas_and_usage_are_404(teams, name):
    client = clients.api(teams.user(name))
    urls = [
        f"/api/v1/tenants/{teams.acme.pk}/",
        f"/api/v1/tenants/{teams.acme.pk}/usage/",
        f"/api/v1/memberships/{teams.memberships['bob'].pk}/",
        f"/api/v1/quotas/{teams.acme_quota.pk}/",
    ]
    for url in urls:
        response = client.get(url)
        assert response.status_code == (200 if name in SEE_ACME else 404), url
        if name not in (*PLATFORM_ADMINS, "tom"):
            assert BRAVO_SECRET not in response.content.decode()


def test_a_tenant_tells_the_caller_their_role(teams):
    data = clients.api(teams.user("andy")).get(f"/api/v1/tenants/{teams.acme.pk}/").json()
    assert data["role"] == Role.APPROVER
    assert (
        clients.api(teams.user("alice")).get(f"/api/v1/tenants/{teams.acme.pk}/").json()["role"]
        is None
    )


# --- tenants ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTORS)
def test_only_platform_admins_create_change_and_delete_tenants(teams, name):
    client = clients.api(teams.user(name))
    created = client.post(
        "/api/v1/tenants/", {"name": "Zeta", "slug": "zeta", "admin": "dave"}, format="json"
    )
    changed = client.patch(f"/api/v1/tenants/{teams.acme.pk}/", {"name": "A2"}, format="json")
    deleted = client.delete(f"/api/v1/tenants/{teams.bravo.pk}/")
    if name in PLATFORM_ADMINS:
        assert created.status_code == 201 and changed.status_code == 200, created.content
        # bravo has GPU requests: kept for their history.
        assert deleted.status_code == 400 and "tenant" in error_fields(deleted)
        zeta = Tenant.objects.get(slug="zeta")
        assert client.delete(f"/api/v1/tenants/{zeta.pk}/").status_code == 204
        actions = set(AuditEntry.objects.values_list("action", flat=True))
        assert {"tenant.create", "tenant.update", "tenant.delete"} <= actions
    else:
        # Acme is not there for those outside it (404), as on its pages.
        assert created.status_code == 403
        assert changed.status_code == (403 if name in SEE_ACME else 404)
        assert deleted.status_code in (403, 404)
        assert not Tenant.objects.filter(slug="zeta").exists()
        assert Tenant.objects.get(pk=teams.acme.pk).name == "Acme"


@pytest.mark.parametrize(
    "bad",
    [{"name": "", "slug": "ok"}, {"name": "Ok", "slug": "not a slug!"},
     {"name": "Ok", "slug": "acme"}, {"name": "Ok", "slug": "add"},
     {"name": "x" * 101, "slug": "ok"}, {"name": "Ok", "slug": "ok", "admin": None},
     {"name": "Ok", "slug": "ok", "admin": ""}, {"name": "Ok", "slug": "ok", "admin": "nobody"},
     {"name": "Ok", "slug": "ok", "admin": "x" * 151}],
)  # fmt: skip
def test_a_bad_tenant_is_400_on_its_field_and_changes_nothing(teams, bad):
    count, entries = Tenant.objects.count(), AuditEntry.objects.count()
    members = Membership.objects.count()
    body = {"admin": "dave", **bad}
    if body["admin"] is None:
        del body["admin"]
    response = clients.api(teams.user("alice")).post("/api/v1/tenants/", body, format="json")
    assert response.status_code == 400
    # Each mistake on its own field: the first admin, else the name or slug.
    fields = set(error_fields(response))
    assert fields and fields <= ({"admin"} if "admin" in bad else {"name", "slug"}), fields
    assert Tenant.objects.count() == count and AuditEntry.objects.count() == entries
    assert Membership.objects.count() == members


@pytest.mark.parametrize("name", ["bob", "andy", "tom", "dave"])
def test_changing_a_tenant_or_its_quota_is_refused_as_on_the_pages(teams, name):
    """Seen but not one's to change: 403 on the pages and the API alike; another tenant's
    (or none's): 404 on both, not a 403 that the API alone would give."""
    expected = 403 if name in SEE_ACME else 404
    page = clients.page(teams.user(name))
    quota = teams.acme_quota
    assert page.get("/tenants/acme/edit/").status_code == expected
    assert page.get(f"/tenants/acme/quotas/{quota.pk}/edit/").status_code == expected
    assert page.post(f"/tenants/acme/quotas/{quota.pk}/delete/").status_code == expected
    api, before, entries = (
        clients.api(teams.user(name)),
        _quota_row(quota),
        AuditEntry.objects.count(),
    )
    tenant_url, quota_url = f"/api/v1/tenants/{teams.acme.pk}/", f"/api/v1/quotas/{quota.pk}/"
    answers = [
        api.patch(tenant_url, {"name": "A2"}, format="json"),
        api.put(tenant_url, {"name": "A2", "slug": "acme"}, format="json"),
        api.delete(tenant_url),
        api.patch(quota_url, {"limit_vgpus": 9}, format="json"),
        api.put(quota_url, {"tenant": teams.acme.pk, "pool": teams.pool.pk}, format="json"),
        api.delete(quota_url),
    ]
    assert [r.status_code for r in answers] == [expected] * len(answers)
    assert Tenant.objects.get(pk=teams.acme.pk).name == "Acme"
    assert _quota_row(quota) == before and AuditEntry.objects.count() == entries


# --- memberships -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ACTORS)
def test_only_the_tenants_admins_add_members(teams, name):
    before = memberships_of(teams.acme)
    body = {"tenant": teams.acme.pk, "username": "dave", "role": "approver"}
    response = clients.api(teams.user(name)).post("/api/v1/memberships/", body, format="json")
    if name in MANAGE_ACME_MEMBERS:
        assert response.status_code == 201, response.content
        assert response.json()["username"] == "dave" and response.json()["role"] == "approver"
        entry = AuditEntry.objects.get(action="membership.create")
        assert entry.tenant_id == teams.acme.pk
    else:
        # A member is refused; an outsider is told there is no such tenant.
        assert response.status_code == (403 if name in SEE_ACME else 400)
        if response.status_code == 400:
            assert set(error_fields(response)) == {"tenant"}
        assert memberships_of(teams.acme) == before


@pytest.mark.parametrize("name", ACTORS)
def test_only_the_tenants_admins_change_roles_and_remove_members(teams, name):
    bob = teams.memberships["bob"]
    client = clients.api(teams.user(name))
    changed = client.patch(f"/api/v1/memberships/{bob.pk}/", {"role": "approver"}, format="json")
    if name in MANAGE_ACME_MEMBERS:
        assert changed.status_code == 200 and changed.json()["role"] == "approver"
        assert client.delete(f"/api/v1/memberships/{bob.pk}/").status_code == 204
        assert not Membership.objects.filter(pk=bob.pk).exists()
    else:
        assert changed.status_code == (403 if name in SEE_ACME else 404)
        assert client.delete(f"/api/v1/memberships/{bob.pk}/").status_code == changed.status_code
        bob.refresh_from_db()
        assert bob.role == Role.MEMBER


@pytest.mark.parametrize(
    "bad",
    [{"username": "nobody-here"}, {"username": "bob"}, {"role": "boss"}, {"username": ""},
     {"tenant": 999999}],
)  # fmt: skip
def test_a_bad_membership_is_400_on_its_field_and_changes_nothing(teams, bad):
    before, entries = Membership.objects.count(), AuditEntry.objects.count()
    body = {"tenant": teams.acme.pk, "username": "dave", "role": "member", **bad}
    response = clients.api(teams.user("erin")).post("/api/v1/memberships/", body, format="json")
    assert response.status_code == 400, response.content
    assert set(error_fields(response)) == set(bad)
    assert Membership.objects.count() == before and AuditEntry.objects.count() == entries


def test_a_membership_changes_only_its_role(teams):
    bob = teams.memberships["bob"]
    response = clients.api(teams.user("alice")).patch(
        f"/api/v1/memberships/{bob.pk}/", {"tenant": teams.bravo.pk}, format="json"
    )
    assert response.status_code == 400 and "tenant" in error_fields(response)
    assert Membership.objects.get(pk=bob.pk).tenant_id == teams.acme.pk


def test_the_last_admin_can_be_neither_removed_nor_demoted_over_the_api(teams):
    erin = teams.memberships["erin"]
    client, entries = clients.api(teams.user("erin")), AuditEntry.objects.count()
    demoted = client.patch(f"/api/v1/memberships/{erin.pk}/", {"role": "member"}, format="json")
    assert demoted.status_code == 400 and "role" in error_fields(demoted)
    assert client.delete(f"/api/v1/memberships/{erin.pk}/").status_code == 400
    erin.refresh_from_db()
    assert erin.role == Role.ADMIN and AuditEntry.objects.count() == entries
    # Not even a platform admin leaves a tenant without an admin.
    assert (
        clients.api(teams.user("alice")).delete(f"/api/v1/memberships/{erin.pk}/").status_code
        == 400
    )


# --- quotas ----------------------------------------------------------------------------------


QUOTA = {"guaranteed_vgpus": 1, "limit_vgpus": 2, "limit_gpu_hours": 5}


@pytest.mark.parametrize("name", ACTORS)
def test_only_platform_admins_set_quotas_over_the_api(teams, name):
    client, other = clients.api(teams.user(name)), PoolFactory()
    created = client.post(
        "/api/v1/quotas/", {"tenant": teams.acme.pk, "pool": other.pk, **QUOTA}, format="json"
    )
    before = _quota_row(teams.acme_quota)
    changed = client.patch(
        f"/api/v1/quotas/{teams.acme_quota.pk}/", {"limit_vgpus": 9}, format="json"
    )
    if name in PLATFORM_ADMINS:
        assert created.status_code == 201 and changed.status_code == 200, created.content
        assert created.json()["limit_gpu_hours"] == 5
        assert _quota_row(teams.acme_quota)["limit_vgpus"] == 9
        entry = AuditEntry.objects.get(action="quota.update")
        assert entry.tenant_id == teams.acme.pk and entry.after["limit_vgpus"] == 9
    else:
        assert created.status_code == 403
        assert changed.status_code == (403 if name in SEE_ACME else 404)
        assert not Quota.objects.filter(pool=other).exists()
        assert _quota_row(teams.acme_quota) == before


@pytest.mark.parametrize(
    "bad",
    [
        {"guaranteed_vgpus": 9},  # above the limit of 8
        {"guaranteed_gpu_hours": 1001},
        {"limit_memory_mib": -1},
        {"limit_vgpus": "many"},
        {"budget_period": "weekly"},
        {"auto_approve_compute_pct": 101},
        {"user_limit_compute_pct": 900},  # above the tenant's limit of 800
        {"pool": 999999},
    ],
)
def test_a_bad_quota_is_400_on_its_field_and_changes_nothing(teams, bad):
    before, entries = _quota_row(teams.acme_quota), AuditEntry.objects.count()
    response = clients.api(teams.user("alice")).patch(
        f"/api/v1/quotas/{teams.acme_quota.pk}/", bad, format="json"
    )
    assert response.status_code == 400, response.content
    assert set(error_fields(response)) == set(bad)
    assert _quota_row(teams.acme_quota) == before and AuditEntry.objects.count() == entries


def test_a_second_quota_in_the_same_pool_is_400_on_the_pool(teams):
    count = Quota.objects.count()
    response = clients.api(teams.user("alice")).post(
        "/api/v1/quotas/", {"tenant": teams.acme.pk, "pool": teams.pool.pk, **QUOTA}, format="json"
    )
    assert response.status_code == 400 and set(error_fields(response)) == {"pool"}
    assert Quota.objects.count() == count


# --- usage -----------------------------------------------------------------------------------


def test_a_tenants_usage_is_held_now_and_gpu_hours_against_its_quota(teams):
    # Rolling 30 days: the test means the same at any time of the month.
    Quota.objects.filter(pk=teams.acme_quota.pk).update(budget_period="rolling30")
    # One more of bob's: a whole card for exactly 90 minutes, ended an hour ago.
    end = timezone.now() - timedelta(hours=1)
    held_allocation(teams.acme, teams.pool, teams.user("bob"), end - timedelta(minutes=90), end,
                    whole_card=True)  # fmt: skip
    response = clients.api(teams.user("bob")).get(f"/api/v1/tenants/{teams.acme.pk}/usage/")
    assert response.status_code == 200
    [pool] = response.json()
    assert pool["pool"]["slug"] == "shared-pool"
    assert pool["used"]["vgpus"] == 1 and pool["used"]["compute_pct"] == 50
    assert pool["limit"]["vgpus"] == 8 and pool["guaranteed"]["vgpus"] == 4
    # The 50 % slice for two hours (to the second: allow its few seconds) plus 1.5.
    hours = Decimal(str(pool["used"]["gpu_hours"]))
    assert Decimal("2.5") <= hours < Decimal("2.51")
    assert [m["username"] for m in pool["members"]] == ["bob"]
    assert (
        BRAVO_SECRET not in response.content.decode() and "bella" not in response.content.decode()
    )
