"""The pools API: pools, their cards and the allocations, allowed and refused per actor."""

from __future__ import annotations

from decimal import Decimal

import pytest

from audit.models import AuditEntry
from pools.models import Allocation, Pool, PoolCard
from quotas.requests.services import create_request
from tests import api, clients
from tests.api import error_fields
from tests.factories import (
    GPUFactory,
    PoolFactory,
    UserFactory,
    gpu_team,
    online_cards,
    placed_lease,
)

pytestmark = pytest.mark.django_db

POOL_ADMIN = ("pools.add_pool", "pools.change_pool", "pools.delete_pool")


class TestPoolAPI(api.ReadTests, api.WriteTests):
    url = "/api/v1/pools/"
    model = Pool
    # Every member reads pools; writes take the pool permissions, which only alice holds
    # among the actors (carol manages nodes, dave is staff without permissions).
    writers = ("alice",)
    create_data = {
        "name": "training",
        "slug": "training",
        "match_models": ["NVIDIA H100 80GB HBM3"],
        "match_labels": {"rack": "r1"},
        "compute_ratio": "2.00",
        "policy": "spread",
    }
    bad_create_data = {"name": "x" * 101, "slug": "not a slug", "compute_ratio": "11"}
    update_data = {"description": "for the big jobs", "memory_ratio": "1.50"}
    bad_update_data = {"compute_ratio": "0.50", "match_labels": {"a b": "c"}}

    @pytest.fixture
    def instance(self) -> Pool:
        return PoolFactory(cards=online_cards(2))


class TestPoolCardAPI(api.ReadTests, api.ReadOnlyTests):
    url = "/api/v1/pool-cards/"
    model = PoolCard

    @pytest.fixture
    def instance(self) -> PoolCard:
        pool = PoolFactory(cards=online_cards(1))
        return pool.cards.get()


# --- allocations: the holder, and those allowed to see all, see one ------------------------


@pytest.fixture
def bobs_slice(bob) -> Allocation:
    pool = PoolFactory(cards=online_cards(2))
    lease = placed_lease(pool, bob, compute_pct=30, memory_mib=8192, label="notebook")
    return lease.allocations.get()


@pytest.mark.parametrize(
    ("name", "sees"), [("alice", True), ("bob", True), ("carol", False), ("dave", False)]
)
def test_allocations_are_read_by_their_holder_and_by_those_who_see_all(
    request, bobs_slice, name, sees
):
    user = request.getfixturevalue(name)
    listed = clients.api(user).get("/api/v1/allocations/")
    assert listed.status_code == 200
    assert [a["id"] for a in listed.json()["results"]] == ([bobs_slice.pk] if sees else [])
    one = clients.api(user).get(f"/api/v1/allocations/{bobs_slice.pk}/")
    assert one.status_code == (200 if sees else 404)


def test_view_allocation_permission_sees_every_allocation(bobs_slice):
    auditor = UserFactory(permissions=["pools.view_allocation"])
    assert clients.api(auditor).get(f"/api/v1/allocations/{bobs_slice.pk}/").status_code == 200


def test_anonymous_callers_read_no_allocations(bobs_slice):
    assert clients.api(None).get("/api/v1/allocations/").status_code == 401


def test_allocations_cannot_be_written_through_the_api(bob, bobs_slice):
    before = Allocation.objects.filter(pk=bobs_slice.pk).values().get()
    c = clients.api(bob)
    url = f"/api/v1/allocations/{bobs_slice.pk}/"
    assert c.post("/api/v1/allocations/", {}, format="json").status_code == 405
    assert c.patch(url, {"compute_pct": 100}, format="json").status_code == 405
    assert c.delete(url).status_code == 405
    assert Allocation.objects.filter(pk=bobs_slice.pk).values().get() == before


def test_an_allocation_tells_how_to_launch_into_it_as_the_agent_expects(bob, bobs_slice):
    data = clients.api(bob).get(f"/api/v1/allocations/{bobs_slice.pk}/").json()
    uuid = bobs_slice.gpu.uuid
    assert data["agent_id"] == f"alloc-{bobs_slice.pk}"
    assert data["launch_env"] == {
        "CUDA_VISIBLE_DEVICES": uuid,
        "NVIDIA_GPU_MEMORY_LIMIT": "8192",
        "CUDA_DEVICE_MEMORY_LIMIT": "8192m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M",
        "GPU_PORTAL_ALLOCATION": f"alloc-{bobs_slice.pk}",
    }
    assert f"export CUDA_VISIBLE_DEVICES={uuid}" in data["export"]
    assert "export CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M" in data["export"]
    assert data["kubernetes_limits"] == {
        "nvidia.com/gpu": 1,
        "nvidia.com/gpumem": 8192,
        "nvidia.com/gpucores": 30,
    }
    assert (data["holder"], data["label"], data["node"]) == (
        "bob",
        "notebook",
        bobs_slice.gpu.node.name,
    )


def test_a_whole_card_carries_no_compute_or_memory_limit(bob):
    pool = PoolFactory(cards=online_cards(1))
    allocation = placed_lease(pool, bob, whole_card=True).allocations.get()
    data = clients.api(bob).get(f"/api/v1/allocations/{allocation.pk}/").json()
    assert set(data["launch_env"]) == {"CUDA_VISIBLE_DEVICES", "GPU_PORTAL_ALLOCATION"}
    assert data["kubernetes_limits"] == {"nvidia.com/gpu": 1}


def test_allocations_filter_by_pool_and_reject_a_bad_state(alice, bobs_slice):
    c = clients.api(alice)
    other = PoolFactory()
    assert c.get(f"/api/v1/allocations/?pool={other.pk}").json()["results"] == []
    assert len(c.get(f"/api/v1/allocations/?pool={bobs_slice.pool_id}").json()["results"]) == 1
    bad = c.get("/api/v1/allocations/?state=melted")
    assert bad.status_code == 400 and "state" in error_fields(bad)


# --- ratios, cards, deletion: refused changes change nothing ---------------------------------


@pytest.fixture
def busy_pool(bob) -> Pool:
    """Compute oversubscribed twice; one card holds 120 % of compute in two slices."""
    pool = PoolFactory(cards=online_cards(1), compute_ratio=Decimal(2))
    pool.cards.update(compute_capacity=200)
    placed_lease(pool, bob, compute_pct=60, memory_mib=1024)
    placed_lease(pool, bob, compute_pct=60, memory_mib=1024)
    return pool


def test_lowering_a_ratio_below_what_is_allocated_is_refused_and_changes_nothing(alice, busy_pool):
    card_before = list(busy_pool.cards.values())
    audits = AuditEntry.objects.count()
    response = clients.api(alice).patch(
        f"/api/v1/pools/{busy_pool.pk}/", {"compute_ratio": "1.00"}, format="json"
    )
    assert response.status_code == 400
    assert "compute_ratio" in error_fields(response)
    assert "allocated" in error_fields(response)["compute_ratio"][0]
    busy_pool.refresh_from_db()
    assert busy_pool.compute_ratio == Decimal(2)
    assert list(busy_pool.cards.values()) == card_before
    assert AuditEntry.objects.count() == audits


def test_lowering_a_ratio_to_what_is_still_allocated_is_allowed(alice, busy_pool):
    response = clients.api(alice).patch(
        f"/api/v1/pools/{busy_pool.pk}/", {"compute_ratio": "1.20"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert busy_pool.cards.get().compute_capacity == 120


def test_a_pool_admin_who_is_not_superuser_may_change_pools():
    admin = UserFactory(permissions=POOL_ADMIN)
    pool = PoolFactory()
    response = clients.api(admin).patch(
        f"/api/v1/pools/{pool.pk}/", {"policy": "spread"}, format="json"
    )
    assert response.status_code == 200
    entry = AuditEntry.objects.get(action="pool.update", target_id=str(pool.pk))
    assert entry.actor_name == admin.get_username()
    assert (entry.before["policy"], entry.after["policy"]) == ("binpack", "spread")


def test_cards_are_added_and_removed_by_hand_with_an_audit_entry(alice):
    pool = PoolFactory()
    gpus = online_cards(2)
    c = clients.api(alice)
    url = f"/api/v1/pools/{pool.pk}/cards/"
    added = c.post(f"{url}add/", {"gpus": [g.pk for g in gpus]}, format="json")
    assert added.status_code == 200 and added.json() == {"changed": 2}
    assert set(pool.cards.values_list("gpu_id", flat=True)) == {g.pk for g in gpus}
    assert c.get(url).json()["count"] == 2
    removed = c.post(f"{url}remove/", {"gpus": [gpus[0].pk]}, format="json")
    assert removed.status_code == 200
    assert list(pool.cards.values_list("gpu_id", flat=True)) == [gpus[1].pk]
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"pool.cards_add", "pool.cards_remove"} <= actions


def test_a_card_holding_slices_cannot_be_removed(alice, busy_pool):
    gpu_id = busy_pool.cards.get().gpu_id
    response = clients.api(alice).post(
        f"/api/v1/pools/{busy_pool.pk}/cards/remove/", {"gpus": [gpu_id]}, format="json"
    )
    assert response.status_code == 400
    assert "hold vGPUs" in error_fields(response)["gpus"][0]
    assert busy_pool.cards.filter(gpu_id=gpu_id).exists()


def test_a_card_of_another_pool_is_refused_and_nothing_joins(alice):
    taken = online_cards(1)
    PoolFactory(cards=taken)
    pool = PoolFactory()
    free = GPUFactory()
    response = clients.api(alice).post(
        f"/api/v1/pools/{pool.pk}/cards/add/", {"gpus": [free.pk, taken[0].pk]}, format="json"
    )
    assert response.status_code == 400 and "another pool" in error_fields(response)["gpus"][0]
    assert not pool.cards.exists()


@pytest.mark.parametrize("body", [{}, {"gpus": []}, {"gpus": ["x"]}, {"gpus": "1"}])
def test_bad_card_lists_are_400(alice, body):
    pool = PoolFactory()
    response = clients.api(alice).post(f"/api/v1/pools/{pool.pk}/cards/add/", body, format="json")
    assert response.status_code == 400 and "gpus" in error_fields(response)


@pytest.mark.parametrize("name", ["bob", "carol", "dave"])
def test_members_cannot_change_a_pools_cards(request, name):
    pool = PoolFactory()
    gpu = GPUFactory()
    user = request.getfixturevalue(name)
    response = clients.api(user).post(
        f"/api/v1/pools/{pool.pk}/cards/add/", {"gpus": [gpu.pk]}, format="json"
    )
    assert response.status_code == 403
    assert not pool.cards.exists()


def test_a_pool_that_held_vgpus_cannot_be_deleted(alice, busy_pool):
    response = clients.api(alice).delete(f"/api/v1/pools/{busy_pool.pk}/")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "conflict" and "held vGPUs" in error["message"]
    assert "fields" not in error
    assert Pool.objects.filter(pk=busy_pool.pk).exists()


def test_a_pool_asked_for_cannot_be_deleted_either(alice, bob):
    team = gpu_team("vision")
    create_request(team.dev, **team.ask())
    assert not team.pool.leases.exists()  # waiting for approval: only the request refers to it
    response = clients.api(alice).delete(f"/api/v1/pools/{team.pool.pk}/")
    assert response.status_code == 409, response.content
    assert Pool.objects.filter(pk=team.pool.pk).exists()


def test_rule_pools_take_matching_free_cards_when_created(alice):
    h100 = online_cards(2, model="NVIDIA H100 80GB HBM3")
    online_cards(1, model="Tesla T4")
    response = clients.api(alice).post(
        "/api/v1/pools/",
        {"name": "h100", "slug": "h100", "match_models": ["NVIDIA H100 80GB HBM3"]},
        format="json",
    )
    assert response.status_code == 201
    assert response.json()["card_count"] == 2
    pool = Pool.objects.get(slug="h100")
    assert set(pool.cards.values_list("gpu_id", flat=True)) == {g.pk for g in h100}
    assert AuditEntry.objects.filter(action="pool.create", target_id=str(pool.pk)).exists()


def test_the_capacity_endpoint_hides_owners_of_leases_the_caller_may_not_see(
    bob, carol, bobs_slice
):
    url = f"/api/v1/pools/{bobs_slice.pool_id}/capacity/"
    mine = clients.api(bob).get(url).json()
    theirs = clients.api(carol).get(url).json()
    [own] = [s for c in mine["cards"] for s in c["slices"]]
    [other] = [s for c in theirs["cards"] for s in c["slices"]]
    assert own["owner"] == "bob · notebook" and own["url"]
    assert other["owner"] is None and other["url"] is None
    assert (other["compute_pct"], other["memory_mib"]) == (30, 8192)
    assert theirs["totals"]["compute_allocated_pct"] == 30
