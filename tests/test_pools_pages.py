"""The pool pages and the admin: who may see and change what; refused input changes nothing."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditEntry
from pools import permissions
from pools.models import Lease, Pool
from telemetry.interface import PollCycle, poll_cycle_recorded
from tests import clients
from tests.factories import PoolFactory, UserFactory, online_cards, placed_lease

pytestmark = pytest.mark.django_db

POOL_ADMIN = ("pools.add_pool", "pools.change_pool", "pools.delete_pool")


@pytest.fixture
def pool() -> Pool:
    return PoolFactory(name="train", slug="train", cards=online_cards(2))


@pytest.fixture
def busy(pool, bob) -> Lease:
    return placed_lease(pool, bob, compute_pct=40, memory_mib=4096, label="bert")


@pytest.mark.parametrize("name", ["alice", "bob", "carol", "dave"])
def test_every_member_reads_the_pool_list_and_its_capacity(request, pool, name):
    client = clients.page(request.getfixturevalue(name))
    assert client.get(reverse("pools:pool_list")).status_code == 200
    page = client.get(pool.get_absolute_url())
    assert page.status_code == 200
    assert b'id="card-map"' in page.content


def test_anonymous_visitors_are_sent_to_log_in(pool):
    for url in (reverse("pools:pool_list"), pool.get_absolute_url(), reverse("pools:pool_add")):
        response = clients.page(None).get(url)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_the_sidebar_links_to_pools(bob):
    page = clients.page(bob).get(reverse("telemetry:dashboard")).content.decode()
    assert f'href="{reverse("pools:pool_list")}"' in page


@pytest.mark.parametrize(
    ("name", "status"), [("alice", 200), ("bob", 403), ("carol", 403), ("dave", 403)]
)
def test_pool_forms_take_the_pool_permissions(request, pool, name, status):
    client = clients.page(request.getfixturevalue(name))
    assert client.get(reverse("pools:pool_add")).status_code == status
    assert client.get(reverse("pools:pool_edit", args=[pool.slug])).status_code == status
    assert client.get(reverse("pools:pool_delete", args=[pool.slug])).status_code == status


def test_a_member_cannot_post_a_pool_or_delete_one(bob, pool):
    client = clients.page(bob)
    assert client.post(reverse("pools:pool_add"), {"name": "x", "slug": "x"}).status_code == 403
    assert client.post(reverse("pools:pool_delete", args=[pool.slug])).status_code == 403
    assert list(Pool.objects.values_list("slug", flat=True)) == ["train"]


def _form(**over) -> dict:
    data = {"name": "infer", "slug": "infer", "description": "", "match_models": "Tesla T4",
            "match_vendor": "", "match_labels": "rack=r1", "match_by_rules": "on",
            "compute_ratio": "2", "memory_ratio": "1.5", "policy": "spread"}  # fmt: skip
    data.update(over)
    return data


def test_a_pool_admin_creates_a_pool_and_the_change_is_audited():
    admin = UserFactory(permissions=POOL_ADMIN)
    response = clients.page(admin).post(reverse("pools:pool_add"), _form())
    assert response.status_code == 302
    pool = Pool.objects.get(slug="infer")
    assert (pool.match_models, pool.match_labels) == (["Tesla T4"], {"rack": "r1"})
    assert pool.compute_ratio == Decimal(2)
    entry = AuditEntry.objects.get(action="pool.create")
    assert entry.actor_name == admin.get_username() and entry.address == "127.0.0.1"


@pytest.mark.parametrize(
    "bad",
    [{"compute_ratio": "11"}, {"memory_ratio": "0.5"}, {"slug": "a b"}, {"slug": "add"},
     {"match_labels": "no-equals-sign"}, {"name": "x" * 101}, {"policy": "random"}],
)  # fmt: skip
def test_bad_pool_input_is_400_and_creates_nothing(alice, bad):
    response = clients.page(alice).post(reverse("pools:pool_add"), _form(**bad))
    assert response.status_code == 400
    assert not Pool.objects.exists()
    assert not AuditEntry.objects.filter(target_type="pools.pool").exists()


def test_lowering_a_ratio_below_the_allocation_on_the_page_is_refused(alice, pool, bob):
    Pool.objects.filter(pk=pool.pk).update(memory_ratio=Decimal(2))
    pool.cards.update(memory_capacity_mib=2 * 81920)
    placed_lease(pool, bob, compute_pct=10, memory_mib=81920, label="a")
    placed_lease(pool, bob, compute_pct=10, memory_mib=81920, same_node=True, label="b")
    placed_lease(pool, bob, compute_pct=10, memory_mib=81920, label="c")
    url = reverse("pools:pool_edit", args=[pool.slug])
    response = clients.page(alice).post(url, _form(name="train", slug="train", memory_ratio="1"))
    assert response.status_code == 400
    assert "more memory allocated than this ratio allows" in response.content.decode()
    pool.refresh_from_db()
    assert pool.memory_ratio == Decimal(2)
    assert set(pool.cards.values_list("memory_capacity_mib", flat=True)) == {2 * 81920}


def test_a_pool_that_held_vgpus_is_kept_with_a_clear_error(alice, pool, busy):
    response = clients.page(alice).post(reverse("pools:pool_delete", args=[pool.slug]))
    assert response.status_code == 409
    assert "cannot be deleted" in response.content.decode()
    assert Pool.objects.filter(pk=pool.pk).exists()


def test_an_empty_pool_is_deleted_and_audited(alice):
    pool = PoolFactory()
    response = clients.page(alice).post(reverse("pools:pool_delete", args=[pool.slug]))
    assert response.status_code == 302
    assert not Pool.objects.filter(pk=pool.pk).exists()
    assert AuditEntry.objects.filter(action="pool.delete", target_id=str(pool.pk)).exists()


def test_a_card_holding_a_slice_is_not_removed_and_the_page_says_why(alice, pool, busy):
    gpu_id = busy.allocations.get().gpu_id
    url = reverse("pools:pool_card_remove", args=[pool.slug, gpu_id])
    response = clients.page(alice).post(url, follow=True)
    assert "cannot leave the pool" in response.content.decode()
    assert pool.cards.filter(gpu_id=gpu_id).exists()


def test_cards_in_no_pool_are_added_by_hand_from_the_page(alice, pool):
    free = online_cards(1)[0]
    url = reverse("pools:pool_cards_add", args=[pool.slug])
    assert clients.page(alice).post(url, {"gpus": [free.pk]}).status_code == 302
    assert pool.cards.filter(gpu=free, added_by_hand=True).exists()
    assert clients.page(alice).post(url, {"gpus": ["nope"]}).status_code == 400


def test_members_cannot_add_or_remove_cards(bob, pool):
    free = online_cards(1)[0]
    client = clients.page(bob)
    assert (
        client.post(
            reverse("pools:pool_cards_add", args=[pool.slug]), {"gpus": [free.pk]}
        ).status_code
        == 403
    )
    gpu = pool.cards.first().gpu_id
    assert client.post(reverse("pools:pool_card_remove", args=[pool.slug, gpu])).status_code == 403
    assert pool.cards.count() == 2


def _initial(page) -> dict:
    html = page.content.decode()
    opening = '<script id="initial-data" type="application/json">'
    start = html.index(opening) + len(opening)
    return json.loads(html[start : html.index("</script>", start)])


def test_the_map_names_only_the_owners_the_viewer_may_see(pool, busy, bob, carol):
    mine = _initial(clients.page(bob).get(pool.get_absolute_url()))
    theirs = _initial(clients.page(carol).get(pool.get_absolute_url()))
    [own] = [s for c in mine["cards"] for s in c["slices"]]
    [other] = [s for c in theirs["cards"] for s in c["slices"]]
    assert own["owner"] == "bob · bert"
    assert other["owner"] is None and other["url"] is None
    assert "bert" not in clients.page(carol).get(pool.get_absolute_url()).content.decode()


def test_fragmentation_counts_the_largest_free_slice_and_the_free_cards(pool, busy):
    picture = _initial(clients.page(busy.holder).get(pool.get_absolute_url()))
    assert picture["fragmentation"] == {
        "max_free_compute_pct": 100, "max_free_memory_mib": 81920,
        "free_cards": 1, "schedulable_cards": 2,
    }  # fmt: skip
    assert picture["totals"]["compute_allocated_pct"] == 40


def test_a_pools_compute_reads_in_cards_and_its_free_cards_say_of_what(pool, busy):
    # "40 / 200 %" read as percent of what? A pool's compute is counted in cards.
    body = clients.page(busy.holder).get(pool.get_absolute_url()).content.decode()
    assert re.search(r'data-total="compute_allocated_pct" data-cards>0.4</span> GPUs', body)
    assert re.search(r'data-total="compute_physical_pct" data-cards>2</span> GPUs', body)
    assert "Free cards, of schedulable" in body
    listing = clients.page(busy.holder).get("/pools/").content.decode()
    assert "0.4 / 2 GPUs" in listing


@pytest.mark.parametrize(("pct", "shown"), [(0, "0"), (40, "0.4"), (355, "3.55"), (6400, "64"),
                                             (None, "\u2013")])  # fmt: skip
def test_compute_percent_reads_as_cards(pct, shown):
    from pools.templatetags.pools_ui import cards

    assert cards(pct) == shown


# --- the allocation page ---------------------------------------------------------------------


def test_the_holder_reads_how_to_use_the_vgpu(bob, busy):
    allocation = busy.allocations.get()
    page = clients.page(bob).get(reverse("pools:allocation_detail", args=[allocation.pk]))
    text = page.content.decode()
    assert page.status_code == 200
    assert f"export CUDA_VISIBLE_DEVICES={allocation.gpu.uuid}" in text
    assert "export CUDA_DEVICE_SM_LIMIT=40" in text
    assert "nvidia.com/gpumem: 4096" in text and "nvidia.com/gpucores: 40" in text
    assert f"alloc-{allocation.pk}" in text


@pytest.mark.parametrize(("name", "status"), [("alice", 200), ("carol", 404), ("dave", 404)])
def test_others_see_an_allocation_only_with_the_permission(request, busy, name, status):
    url = reverse("pools:allocation_detail", args=[busy.allocations.get().pk])
    assert clients.page(request.getfixturevalue(name)).get(url).status_code == status


def test_a_granted_rule_widens_the_visible_leases(busy, carol, monkeypatch):
    assert not permissions.visible_leases(carol).exists()
    monkeypatch.setattr(permissions, "_grants", [])
    permissions.grant_leases(lambda user: Q(label="bert") if user == carol else None)
    assert list(permissions.visible_leases(carol)) == [busy]
    url = reverse("pools:allocation_detail", args=[busy.allocations.get().pk])
    assert clients.page(carol).get(url).status_code == 200


# --- cards discovered later --------------------------------------------------------------------


def test_a_new_card_joins_the_rule_pool_that_matches_it_after_a_poll_cycle():
    rule_pool = PoolFactory(match_by_rules=True, match_models=["Tesla T4"])
    [t4] = online_cards(1, model="Tesla T4")
    [other] = online_cards(1, model="NVIDIA L40S")
    poll_cycle_recorded.send(
        sender=PollCycle, cycle=PollCycle(timezone.now(), (t4.node_id, other.node_id))
    )
    assert list(rule_pool.cards.values_list("gpu_id", flat=True)) == [t4.pk]
    assert not other.__class__.objects.get(pk=other.pk).__dict__.get("pool_card_id")


# --- the admin ---------------------------------------------------------------------------------


def test_the_admin_changes_a_pool_through_the_rules_and_the_audit(alice, pool, busy):
    client = clients.page(alice)
    url = reverse("admin:pools_pool_change", args=[pool.pk])
    assert client.get(url).status_code == 200
    data = _form(name="train", slug="train", compute_ratio="1", match_by_rules="", match_models="",
                 match_labels="")  # fmt: skip
    data.update({"match_models": "[]", "match_labels": "{}", "cards-TOTAL_FORMS": "2",
                 "cards-INITIAL_FORMS": "2", "cards-MIN_NUM_FORMS": "0",
                 "cards-MAX_NUM_FORMS": "1000"})  # fmt: skip
    for i, card in enumerate(pool.cards.all()):
        data[f"cards-{i}-id"] = card.pk
        data[f"cards-{i}-pool"] = pool.pk
    data["description"] = "from the admin"
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    pool.refresh_from_db()
    assert pool.description == "from the admin"
    assert AuditEntry.objects.filter(action="pool.update", target_id=str(pool.pk)).exists()


def test_leases_and_allocations_are_read_only_in_the_admin(alice, busy):
    client = clients.page(alice)
    allocation = busy.allocations.get()
    assert client.get(reverse("admin:pools_lease_change", args=[busy.pk])).status_code == 200
    assert client.get(reverse("admin:pools_allocation_changelist")).status_code == 200
    before = Lease.objects.filter(pk=busy.pk).values().get()
    client.post(reverse("admin:pools_lease_change", args=[busy.pk]), {"label": "x"})
    client.post(reverse("admin:pools_allocation_delete", args=[allocation.pk]), {"post": "yes"})
    assert Lease.objects.filter(pk=busy.pk).values().get() == before
    assert allocation.__class__.objects.filter(pk=allocation.pk).exists()
