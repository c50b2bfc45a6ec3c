"""The idle report and the accounting, pages and API: who sees which rows (a member only
their tenants'), sorting, filtering, CSV, the reclaim actions, and bad input refused
with nothing changed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.interface import AuditEntry
from pools.models import Allocation, PoolCard
from reports import scan, services
from reports.models import Exemption, ReclaimPolicy, ReclaimWarning
from telemetry.models import GpuMinute
from tests import clients
from tests.factories import GPUFactory
from tests.tenants import BRAVO_SECRET, build_teams

pytestmark = pytest.mark.django_db
# Exemptions end within a year.
SOON = (timezone.localtime() + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")
SOON_Z = (timezone.now() + timedelta(days=30)).strftime("%Y-%m-%dT%H:%MZ")


@pytest.fixture
def teams(everyone):
    """acme (bob's) and bravo (bella's) each hold a vGPU on a card of its own, both unused
    for the last three hours; the scan has run."""
    teams = build_teams(everyone)
    now = timezone.now().replace(second=0, microsecond=0)
    for allocation in Allocation.objects.all():
        gpu = GPUFactory()
        Allocation.objects.filter(pk=allocation.pk).update(
            gpu=gpu, placed_at=now - timedelta(hours=4)
        )
        GpuMinute.objects.bulk_create(
            GpuMinute(gpu=gpu, bucket=now - timedelta(minutes=m), samples=12, util_avg=0,
                      util_max=0, memory_used_avg_mib=0, memory_used_max_mib=0)
            for m in range(1, 181)
        )  # fmt: skip
    ReclaimPolicy.objects.create(pool=teams.pool, reclaim=True)
    scan.scan(now)
    teams.now = now
    return teams


def _tenants(rows) -> set[str]:
    return {row["tenant"] for row in rows}


@pytest.mark.parametrize(
    ("name", "seen"),
    [("alice", {"Acme", BRAVO_SECRET}), ("bob", {"Acme"}), ("erin", {"Acme"}),
     ("tom", {BRAVO_SECRET}), ("dave", set())],
)  # fmt: skip
def test_each_reader_sees_only_their_tenants_rows_in_the_api(teams, name, seen):
    rows = clients.api(teams.user(name)).get("/api/v1/idle-report/").json()["results"]
    assert _tenants(rows) == seen
    assert all(row["idle"] for row in rows)


def test_the_page_shows_a_member_their_tenants_idle_rows_and_nothing_of_another_tenant(teams):
    response = clients.page(teams.user("bob")).get("/idle/")
    assert response.status_code == 200
    text = response.content.decode()
    assert 'id="idle-allocations"' in text and "Acme" in text
    assert BRAVO_SECRET not in text
    # The physical cards are the fleet's: not shown to a member.
    assert 'id="idle-cards"' not in text


def test_the_csv_has_a_row_per_visible_allocation(teams):
    response = clients.page(teams.user("bob")).get("/idle/", {"format": "csv"})
    lines = b"".join(response.streaming_content).decode().strip().splitlines()
    assert lines[0].startswith("allocation,lease,tenant")
    assert len(lines) == 2 and BRAVO_SECRET not in "".join(lines)
    response = clients.page(teams.user("alice")).get("/idle/", {"format": "csv"})
    assert len(b"".join(response.streaming_content).decode().strip().splitlines()) == 3


def test_filters_and_sorting(teams):
    client = clients.api(teams.user("alice"))
    acme = client.get("/api/v1/idle-report/", {"tenant": teams.acme.pk}).json()["results"]
    assert _tenants(acme) == {"Acme"}
    assert client.get("/api/v1/idle-report/", {"idle": "false"}).json()["count"] == 0
    ordered = client.get("/api/v1/idle-report/", {"ordering": "-wasted"}).json()["results"]
    wasted = [row["wasted_gpu_hours"] for row in ordered]
    assert wasted == sorted(wasted, reverse=True)


@pytest.mark.parametrize(
    "query",
    [{"node": "abc"}, {"tenant": "-1"}, {"idle": "maybe"}, {"ordering": "password"},
     {"pool": "x" * 101}],
)  # fmt: skip
def test_bad_filters_are_a_400_on_the_page_and_the_api(teams, query):
    assert clients.api(teams.user("alice")).get("/api/v1/idle-report/", query).status_code == 400
    assert clients.page(teams.user("alice")).get("/idle/", query).status_code == 400


def test_the_page_filters_name_tenants_and_nodes_with_translated_empty_choices(teams):
    bob_node = Allocation.objects.get(lease__gpu_request__tenant=teams.acme).gpu.node
    text = clients.page(teams.user("bob")).get("/idle/").content.decode()
    form = text[text.index('class="card card-body mb-3 idle-filters"') :].split("</form>")[0]
    assert "(id)" not in form and "(slug)" not in form and "---------" not in form
    assert '<label class="form-label" for="id_tenant">Tenant</label>' in form
    assert '<label class="form-label" for="id_node">Node</label>' in form
    for empty in ("All tenants", "All pools", "All nodes", "Any"):
        assert f'<option value="" selected>{empty}</option>' in form, empty
    # Bob's tenant by name; another tenant's is not offered.
    assert f'<option value="{teams.acme.pk}">Acme</option>' in form and BRAVO_SECRET not in form
    assert f'<option value="{bob_node.pk}">{bob_node.name}</option>' in form
    assert '<option value="shared-pool">shared-pool</option>' in form
    text = (
        clients.page(teams.user("alice")).get("/idle/", {"tenant": teams.acme.pk}).content.decode()
    )
    assert f'<option value="{teams.acme.pk}" selected>Acme</option>' in text
    assert 'id="idle-allocations"' in text and BRAVO_SECRET not in text.split("</form>")[1]


@pytest.mark.parametrize("who", ["bob", "alice"])
def test_a_tenant_or_node_the_reader_does_not_see_is_a_clear_400(teams, who):
    """The same answer for another tenant and for none: nothing tells bravo exists."""
    tenants = [teams.bravo.pk, 999999] if who == "bob" else [999999]
    for tenant in tenants:
        response = clients.api(teams.user(who)).get("/api/v1/idle-report/", {"tenant": tenant})
        assert response.status_code == 400, response.content
        assert "Not one of the tenants you see." in response.content.decode()
        assert BRAVO_SECRET not in response.content.decode()
        response = clients.page(teams.user(who)).get("/idle/", {"tenant": tenant})
        assert response.status_code == 400
        text = response.content.decode()
        assert "Not one of the tenants you see." in text
        assert (BRAVO_SECRET in text) == (who == "alice")  # in the list of alice's
        assert 'id="idle-allocations"' not in text  # no rows rather than unfiltered ones
    response = clients.api(teams.user(who)).get("/api/v1/idle-report/", {"node": 999999})
    assert response.status_code == 400 and "No node has this id." in response.content.decode()


def test_anonymous_readers_get_nothing(teams):
    assert clients.api().get("/api/v1/idle-report/").status_code in (401, 403)
    assert clients.page().get("/idle/").status_code == 302


def test_a_tenant_admin_exempts_from_the_page_and_a_member_may_not(teams):
    lease_id = Allocation.objects.get(lease__gpu_request__tenant=teams.acme).lease_id
    form = {"reason": "busy at month end", "ends_at": SOON}
    url = f"/idle/leases/{lease_id}/exempt/"
    assert clients.page(teams.user("bob")).post(url, form).status_code == 404
    assert clients.page(teams.user("tom")).post(url, form).status_code == 404
    assert not Exemption.objects.exists()
    assert clients.page(teams.user("erin")).post(url, form).status_code == 302
    exemption = Exemption.objects.get()
    assert exemption.reason == "busy at month end"
    assert AuditEntry.objects.filter(action="reclaim.exempt").count() == 1


@pytest.mark.parametrize(
    "form",
    [{"reason": "", "ends_at": SOON}, {"reason": "x", "ends_at": "soon"},
     {"reason": "x" * 501, "ends_at": SOON},
     {"reason": "x", "ends_at": "2001-01-01T00:00"}],
)  # fmt: skip
def test_a_bad_exemption_form_is_a_400_that_changes_nothing(teams, form):
    lease_id = Allocation.objects.get(lease__gpu_request__tenant=teams.acme).lease_id
    client = clients.page(teams.user("erin"))  # signing in is audited: count what follows
    before = AuditEntry.objects.count()
    response = client.post(f"/idle/leases/{lease_id}/exempt/", form)
    assert response.status_code == 400
    assert not Exemption.objects.exists() and AuditEntry.objects.count() == before


def test_the_owner_appeals_over_the_api_and_nobody_else_can(teams):
    services.reclaim(teams.now)
    bravo_warning = ReclaimWarning.objects.get(tenant_id=teams.bravo.pk)
    url = f"/api/v1/reclaim-warnings/{bravo_warning.pk}/appeal/"
    assert clients.api(teams.user("bob")).post(url, {"reason": "mine"}).status_code == 404
    assert (
        clients.api(teams.user("tom")).post(url, {"reason": "x"}).status_code == 404
    )  # not the owner
    assert clients.api(teams.user("bella")).post(url, {"reason": ""}).status_code == 400
    bravo_warning.refresh_from_db()
    assert bravo_warning.state == "warned"
    response = clients.api(teams.user("bella")).post(url, {"reason": "nightly job"})
    assert response.status_code == 200 and response.json()["state"] == "appealed"
    decide = f"/api/v1/reclaim-warnings/{bravo_warning.pk}/decide/"
    assert clients.api(teams.user("bella")).post(decide, {"grant": True}).status_code == 404
    assert clients.api(teams.user("erin")).post(decide, {"grant": True}).status_code == 404
    assert clients.api(teams.user("tom")).post(decide, {"grant": "perhaps"}).status_code == 400
    assert clients.api(teams.user("tom")).post(decide, {"grant": True}).json()["state"] == "granted"


def test_a_member_lists_only_their_tenants_warnings_and_exemptions(teams):
    services.reclaim(teams.now)
    rows = clients.api(teams.user("bob")).get("/api/v1/reclaim-warnings/").json()["results"]
    assert {row["tenant_id"] for row in rows} == {teams.acme.pk}
    assert clients.api(teams.user("dave")).get("/api/v1/reclaim-warnings/").json()["count"] == 0


def test_the_exemption_api_refuses_others_leases_and_bad_input(teams):
    bravo_lease = Allocation.objects.get(lease__gpu_request__tenant=teams.bravo).lease_id
    acme_lease = Allocation.objects.get(lease__gpu_request__tenant=teams.acme).lease_id
    body = {"lease": bravo_lease, "reason": "x", "ends_at": SOON_Z}
    assert (
        clients.api(teams.user("erin")).post("/api/v1/reclaim-exemptions/", body).status_code == 400
    )
    bad = {"lease": acme_lease, "reason": "x", "ends_at": "2001-01-01T00:00Z"}
    assert (
        clients.api(teams.user("erin")).post("/api/v1/reclaim-exemptions/", bad).status_code == 400
    )
    assert not Exemption.objects.exists()
    good = {**bad, "ends_at": SOON_Z}
    assert (
        clients.api(teams.user("erin")).post("/api/v1/reclaim-exemptions/", good).status_code == 201
    )


def test_accounting_shows_a_member_their_tenants_lines_only(teams):
    data = clients.api(teams.user("bob")).get("/api/v1/accounting/").json()
    assert {line["tenant"] for line in data["lines"]} == {"Acme"}
    assert float(data["total"]["gpu_hours"]) > 0
    everyone = clients.api(teams.user("alice")).get("/api/v1/accounting/").json()
    assert {line["tenant"] for line in everyone["lines"]} == {"Acme", BRAVO_SECRET}
    response = clients.page(teams.user("bob")).get("/accounting/")
    assert response.status_code == 200 and BRAVO_SECRET not in response.content.decode()


@pytest.mark.parametrize("month", ["2026-13", "abc", "1999-01", "2026-1"])
def test_a_bad_month_is_a_400(teams, month):
    assert (
        clients.api(teams.user("bob")).get("/api/v1/accounting/", {"month": month}).status_code
        == 400
    )
    assert clients.page(teams.user("bob")).get("/accounting/", {"month": month}).status_code == 400


def test_the_idle_cards_table_names_and_links_each_node_and_card(teams):
    # A card of the pool with no allocation on it: an idle card the next scan lists.
    gpu = GPUFactory(node__name="rack7-gpu-node-03", index=5)
    PoolCard.objects.create(pool=teams.pool, gpu=gpu)
    scan.scan(teams.now)
    text = clients.page(teams.user("alice")).get("/idle/").content.decode()
    row = text[text.index(f'data-card="{gpu.pk}"') :].split("</tr>")[0]
    assert f'<a href="/nodes/{gpu.node_id}/" data-node="{gpu.node_id}">rack7-gpu-node-03</a>' in row
    assert f'<a href="/gpus/{gpu.pk}/">GPU 5</a>' in row
    cards = clients.api(teams.user("alice")).get("/api/v1/idle-cards/").json()["results"]
    card = next(c for c in cards if c["gpu_id"] == gpu.pk)
    assert (card["node_name"], card["gpu_index"], card["node_id"]) == (
        "rack7-gpu-node-03",
        5,
        gpu.node_id,
    )


def test_the_schema_documents_the_rows_as_the_api_answers_them(teams):
    # The row's fields sit beside the scan's in the answer; the schema said "row" before.
    schema = clients.page().get("/api/schema/", {"format": "json"}).json()
    documented = schema["components"]["schemas"]["AllocationIdle"]
    [row, *_] = clients.api(teams.user("alice")).get("/api/v1/idle-report/").json()["results"]
    assert set(row) == set(documented["properties"]) == set(documented["required"])
    one = clients.api(teams.user("alice")).get(f"/api/v1/idle-report/{row['allocation']}/").json()
    assert set(one) == set(row)


def test_the_sort_menu_speaks_chinese(teams):
    body = clients.page(teams.user("alice")).get("/idle/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    text = body.content.decode()
    menu = text[text.index('name="ordering"') :].split("</select>")[0]
    assert "浪费的 GPU 小时" in menu and "\uff08降序\uff09" in menu, menu
    assert "descending" not in menu and "Wasted" not in menu
