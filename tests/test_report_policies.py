"""The pools' reclaim policies and the unit prices on the portal's pages (platform admins):
list, add, edit, delete, each audited with the row before and after; bad input is a field
error that changes nothing; everyone else is refused."""

from __future__ import annotations

from decimal import Decimal

import pytest

from audit.interface import AuditEntry
from reports import policies
from reports.models import ReclaimPolicy, UnitPrice
from tests import clients
from tests.factories import PoolFactory
from tests.tenants import ACTORS, PLATFORM_ADMINS, teams_fixture  # noqa: F401 (teams)

pytestmark = pytest.mark.django_db
POLICY = {"idle_util_pct": 7, "idle_memory_pct": 12, "idle_window_minutes": 90,
          "reclaim": "on", "grace_hours": 12}  # fmt: skip
PRICE = {"currency": "CNY", "per_gpu_hour": "12.5", "per_compute_pct_hour": "0.125",
         "per_memory_gib_hour": "0.01"}  # fmt: skip


def _rows() -> tuple:
    return (
        list(ReclaimPolicy.objects.order_by("pk").values()),
        list(UnitPrice.objects.order_by("pk").values()),
        AuditEntry.objects.count(),
    )


@pytest.mark.parametrize("name", ACTORS)
def test_only_platform_admins_see_and_change_policies_and_prices(teams, name):
    pool = teams.pool
    policy = ReclaimPolicy.objects.create(pool=PoolFactory(name="other-pool"))
    price = UnitPrice.objects.create(pool=None, per_gpu_hour=Decimal(3))
    client = clients.page(teams.user(name))
    before = _rows()
    pages = ["/idle/policies/", "/idle/policies/add/", f"/idle/policies/{policy.pk}/edit/",
             "/accounting/prices/", "/accounting/prices/add/",
             f"/accounting/prices/{price.pk}/edit/"]  # fmt: skip
    reads = [client.get(url).status_code for url in pages]
    writes = [
        client.post("/idle/policies/add/", {**POLICY, "pool": pool.pk}).status_code,
        client.post(f"/idle/policies/{policy.pk}/edit/", POLICY).status_code,
        client.post(f"/accounting/prices/{price.pk}/edit/", PRICE).status_code,
        client.post(f"/idle/policies/{policy.pk}/delete/").status_code,
        client.post(f"/accounting/prices/{price.pk}/delete/").status_code,
    ]
    if name in PLATFORM_ADMINS:
        assert reads == [200] * 6 and writes == [302] * 5
        assert list(ReclaimPolicy.objects.values_list("pool_id", flat=True)) == [pool.pk]
        assert not UnitPrice.objects.exists()
    else:
        assert reads == [403] * 6 and writes == [403] * 5
        assert _rows() == before


def test_the_idle_report_and_accounting_link_the_pages_for_platform_admins(teams):
    admin, member = clients.page(teams.user("oscar")), clients.page(teams.user("bob"))
    for page, link in (("/idle/", "/idle/policies/"), ("/accounting/", "/accounting/prices/")):
        assert f'href="{link}"' in admin.get(page).content.decode()
        assert f'href="{link}"' not in member.get(page).content.decode()


def test_a_policy_is_added_edited_and_removed_with_its_audit(teams):
    client, pool = clients.page(teams.user("oscar")), teams.pool
    listed = client.get("/idle/policies/").content.decode()
    assert f'href="/idle/policies/add/?pool={pool.pk}"' in listed  # the defaults, to set
    assert client.get(f"/idle/policies/add/?pool={pool.pk}").context["form"].initial == {
        "pool": str(pool.pk)
    }
    assert client.post("/idle/policies/add/", {**POLICY, "pool": pool.pk}).status_code == 302
    policy = ReclaimPolicy.objects.get(pool=pool)
    assert (policy.idle_util_pct, policy.idle_window_minutes, policy.reclaim) == (7, 90, True)
    created = AuditEntry.objects.get(action="reclaim_policy.create")
    assert created.actor_name == "oscar" and created.after["grace_hours"] == 12
    assert created.address == "127.0.0.1"
    edited = {**POLICY, "grace_hours": 48}
    del edited["reclaim"]  # an unticked box
    assert client.post(f"/idle/policies/{policy.pk}/edit/", edited).status_code == 302
    update = AuditEntry.objects.get(action="reclaim_policy.update")
    assert (update.before["grace_hours"], update.after["grace_hours"]) == (12, 48)
    assert (update.before["reclaim"], update.after["reclaim"]) == (True, False)
    assert client.post(f"/idle/policies/{policy.pk}/delete/").status_code == 302
    assert not ReclaimPolicy.objects.exists()
    deleted = AuditEntry.objects.get(action="reclaim_policy.delete")
    assert deleted.before["pool_id"] == pool.pk and deleted.target_id == str(policy.pk)
    assert deleted.target_type == "reports.reclaimpolicy"


@pytest.mark.parametrize(
    "bad, field",
    [({"idle_util_pct": 0}, "idle_util_pct"), ({"idle_util_pct": 101}, "idle_util_pct"),
     ({"idle_memory_pct": -1}, "idle_memory_pct"), ({"idle_window_minutes": 5},
     "idle_window_minutes"), ({"grace_hours": 0}, "grace_hours"),
     ({"grace_hours": "many"}, "grace_hours"), ({"pool": ""}, "pool"), ({"pool": 999999}, "pool")],
)  # fmt: skip
def test_a_bad_policy_is_a_field_error_and_changes_nothing(teams, bad, field):
    client = clients.page(teams.user("oscar"))
    before = _rows()
    response = client.post("/idle/policies/add/", {**POLICY, "pool": teams.pool.pk, **bad})
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert _rows() == before


def test_a_bad_edit_of_a_policy_changes_nothing(teams):
    policy = ReclaimPolicy.objects.create(pool=teams.pool)
    client = clients.page(teams.user("oscar"))
    before = _rows()
    response = client.post(f"/idle/policies/{policy.pk}/edit/", {**POLICY, "idle_util_pct": 0})
    assert response.status_code == 200 and "idle_util_pct" in response.context["form"].errors
    assert _rows() == before


def test_a_pool_has_one_policy_and_one_price(teams):
    oscar = teams.user("oscar")
    policies.create_policy(oscar, pool=teams.pool)
    UnitPrice.objects.create(pool=teams.pool)
    before = _rows()
    for call, kwargs in ((policies.create_policy, {}), (policies.create_price, {})):
        with pytest.raises(policies.ValidationError) as refused:
            call(oscar, pool=teams.pool, **kwargs)
        assert "pool" in refused.value.message_dict
    assert _rows() == before
    # On the page, a pool that has a policy is not offered.
    form = clients.page(teams.user("oscar")).get("/idle/policies/add/").context["form"]
    assert teams.pool not in form.fields["pool"].queryset


def test_prices_are_added_edited_and_removed_with_their_audit(teams):
    client, pool = clients.page(teams.user("oscar")), teams.pool
    assert client.post("/accounting/prices/add/", {**PRICE, "pool": ""}).status_code == 302
    default = UnitPrice.objects.get(pool=None)
    assert default.per_gpu_hour == Decimal("12.5")
    assert AuditEntry.objects.get(action="unit_price.create").after["per_gpu_hour"] == "12.5000"
    response = client.post(
        "/accounting/prices/add/", {**PRICE, "pool": pool.pk, "per_gpu_hour": 20}
    )
    assert response.status_code == 302
    own = UnitPrice.objects.get(pool=pool)
    listed = client.get("/accounting/prices/").content.decode()
    assert 'data-pool="shared-pool"' in listed and "20.0000" in listed
    assert (
        client.post(f"/accounting/prices/{own.pk}/edit/", {**PRICE, "per_gpu_hour": 25}).status_code
        == 302
    )
    update = AuditEntry.objects.get(action="unit_price.update")
    assert (update.before["per_gpu_hour"], update.after["per_gpu_hour"]) == ("20.0000", "25.0000")
    assert client.post(f"/accounting/prices/{own.pk}/delete/").status_code == 302
    assert list(UnitPrice.objects.values_list("pool_id", flat=True)) == [None]
    deleted = AuditEntry.objects.get(action="unit_price.delete")
    assert deleted.before["pool_id"] == pool.pk
    assert (deleted.target_type, deleted.target_id) == ("reports.unitprice", str(own.pk))


@pytest.mark.parametrize(
    "bad, field",
    [({"per_gpu_hour": "-1"}, "per_gpu_hour"), ({"per_gpu_hour": "abc"}, "per_gpu_hour"),
     ({"per_compute_pct_hour": "0.0000001"}, "per_compute_pct_hour"),
     ({"per_memory_gib_hour": "123456789"}, "per_memory_gib_hour"),
     ({"currency": ""}, "currency"), ({"currency": "TOOLONGCUR"}, "currency"),
     ({"currency": "USD"}, "currency"), ({"pool": ""}, "pool")],
)  # fmt: skip
def test_a_bad_price_is_a_field_error_and_changes_nothing(teams, bad, field):
    # A default exists (in CNY): another default, or a price in another currency, is refused.
    UnitPrice.objects.create(pool=None, currency="CNY")
    client = clients.page(teams.user("oscar"))
    before = _rows()
    response = client.post("/accounting/prices/add/", {**PRICE, "pool": teams.pool.pk, **bad})
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert _rows() == before


def test_the_accounting_charges_the_price_set_on_the_page(teams):
    client = clients.page(teams.user("oscar"))
    client.post("/accounting/prices/add/", {**PRICE, "pool": "", "per_compute_pct_hour": 0,
                                           "per_memory_gib_hour": 0})  # fmt: skip
    data = client.get("/accounting/").context["data"]
    # The teams hold a half card and a whole card, placed two hours ago: 3 GPU-hours.
    assert data.currency == "CNY"
    # Each line is charged its own GPU-hours at the price, to the cent; the total adds them.
    for line in data.lines:
        assert line.cost == (line.gpu_hours * Decimal("12.5")).quantize(Decimal("0.01"))
    assert data.total.cost == sum(line.cost for line in data.lines)
    assert data.total.cost > 0


@pytest.mark.parametrize(
    ("path", "item"),
    [("/idle/", "idle"), ("/idle/policies/", "idle"), ("/accounting/", "accounting"),
     ("/accounting/prices/", "accounting")],
)  # fmt: skip
def test_the_sidebar_marks_the_report_the_page_belongs_to(teams, path, item):
    html = clients.page(teams.user(PLATFORM_ADMINS[0])).get(path).content.decode()
    href = {"idle": "/idle/", "accounting": "/accounting/"}[item]
    assert f'href="{href}" aria-current="page"' in html
