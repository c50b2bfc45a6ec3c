"""Pools and requests over a mixed fleet (issue #25): pools take cards by vendor and model,
slices of Ascend and Hygon cards go by HAMi's names for them, a slice of a card HAMi does
not slice is refused (a form error, a 400, nothing written), and the pages name vendors."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.utils import translation

from pools import launch, slicing
from pools.interface import PlacementError
from pools.models import Lease, Pool
from pools.services import add_cards
from quotas.models import GpuRequest
from quotas.requests.services import create_request
from tests import clients
from tests.api import error_fields
from tests.factories import PoolFactory, QuotaFactory, gpu_team, online_cards, placed_lease

pytestmark = pytest.mark.django_db

ASCEND = {"vendor": "ascend", "model": "Ascend 910B2C", "memory_total_mib": 65536}
HYGON = {"vendor": "hygon", "model": "DCU K100_AI", "memory_total_mib": 65520}
AMD = {"vendor": "amd", "model": "Arcturus GL-XL [Instinct MI100]", "memory_total_mib": 32768}


# --- pools match cards by vendor ---------------------------------------------------------


def test_a_pool_takes_the_cards_of_its_vendor_only(alice):
    nvidia = online_cards(2)
    ascend = online_cards(2, **ASCEND)
    online_cards(1, **HYGON)
    c = clients.api(alice)
    response = c.post("/api/v1/pools/", {"name": "npu", "slug": "npu", "match_vendor": "ascend"},
                      format="json")  # fmt: skip
    assert response.status_code == 201, response.content
    assert response.json()["match_vendor"] == "ascend"
    pool = Pool.objects.get(slug="npu")
    assert set(pool.cards.values_list("gpu_id", flat=True)) == {g.pk for g in ascend}
    # Vendor and model together; the NVIDIA cards are no Ascend model.
    response = c.post("/api/v1/pools/", {
        "name": "nv", "slug": "nv", "match_vendor": "nvidia",
        "match_models": ["NVIDIA H100 80GB HBM3", "Ascend 910B2C"]}, format="json")  # fmt: skip
    assert response.status_code == 201, response.content
    nv = Pool.objects.get(slug="nv")
    assert set(nv.cards.values_list("gpu_id", flat=True)) == {g.pk for g in nvidia}
    listed = c.get("/api/v1/pool-cards/", {"vendor": "ascend"}).json()["results"]
    assert sorted(card["gpu"] for card in listed) == sorted(g.pk for g in ascend)
    assert {card["vendor"] for card in listed} == {"ascend"}
    assert c.get("/api/v1/pool-cards/", {"vendor": "biren"}).status_code == 400


@pytest.mark.parametrize("vendor", ["biren", "Ascend", "NVIDIA", 3])
def test_an_unknown_vendor_rule_is_a_400_writing_nothing(alice, vendor):
    online_cards(1, **ASCEND)
    response = clients.api(alice).post(
        "/api/v1/pools/", {"name": "x", "slug": "x", "match_vendor": vendor}, format="json"
    )
    assert response.status_code == 400 and "match_vendor" in error_fields(response)
    assert not Pool.objects.exists()


def test_the_pool_form_offers_the_vendors_and_refuses_another(alice):
    c = clients.page(alice)
    page = c.get("/pools/add/").content.decode()
    assert '<option value="hygon">Hygon DCU</option>' in page
    response = c.post("/pools/add/", {"name": "x", "slug": "x", "match_vendor": "biren",
                                      "compute_ratio": "1", "memory_ratio": "1",
                                      "policy": "binpack"})  # fmt: skip
    assert response.status_code == 400 and "match_vendor" in response.context["form"].errors
    assert not Pool.objects.exists()


# --- slicing per vendor ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vendor", "model", "names"),
    [
        ("nvidia", "NVIDIA A100", ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores")),
        ("ascend", "Ascend 910B2C",
         ("huawei.com/Ascend910B2", "huawei.com/Ascend910B2-memory", None)),
        ("ascend", "Ascend 310P3", ("huawei.com/Ascend310P", "huawei.com/Ascend310P-memory", None)),
        ("ascend", "Ascend 910B1", ("huawei.com/Ascend910", None, None)),
        ("hygon", "DCU K100_AI", ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores")),
        ("cambricon", "MLU370-X8", ("cambricon.com/mlunum", "cambricon.com/mlumem", None)),
        ("cambricon", "MLU290-M5", ("cambricon.com/mlu", None, None)),
        ("metax", "MXC500",
         ("metax-tech.com/sgpu", "metax-tech.com/vmemory", "metax-tech.com/vcore")),
        ("amd", "MI100", ("amd.com/gpu", None, None)),
        ("moorethreads", "MTT S4000", ("mthreads.com/vgpu", None, None)),
    ],
)  # fmt: skip
def test_each_vendor_has_its_hami_names_or_whole_cards(vendor, model, names):
    got = slicing.resources(vendor, model)
    assert (got.count, got.memory, got.cores) == names
    assert slicing.sliceable(vendor, model) is (names[1] is not None)


def test_an_ascend_slice_launches_by_hamis_ascend_names(bob):
    pool = PoolFactory(cards=online_cards(2, **ASCEND))
    allocation = placed_lease(pool, bob, compute_pct=25, memory_mib=16384).allocations.get()
    data = clients.api(bob).get(f"/api/v1/allocations/{allocation.pk}/").json()
    assert data["kubernetes_limits"] == {
        "huawei.com/Ascend910B2": 1,
        "huawei.com/Ascend910B2-memory": 16384,  # HAMi's MB, as the agent's MiB
    }
    # No CUDA variables on an NPU: the card by its index, the slice for the agent.
    assert data["launch_env"] == {
        "ASCEND_RT_VISIBLE_DEVICES": str(allocation.gpu.index),
        "GPU_PORTAL_ALLOCATION": f"alloc-{allocation.pk}",
    }
    settings = launch.launch_settings(allocation)
    assert "huawei.com/Ascend910B2-memory: 16384" in settings["kubernetes"]
    assert settings["nvidia"] is False


def test_a_hygon_slice_takes_memory_and_cores(bob):
    pool = PoolFactory(cards=online_cards(1, **HYGON))
    allocation = placed_lease(pool, bob, compute_pct=40, memory_mib=8192).allocations.get()
    assert launch.kubernetes_limits(allocation) == {
        "hygon.com/dcunum": 1, "hygon.com/dcumem": 8192, "hygon.com/dcucores": 40,
    }  # fmt: skip
    assert set(launch.launch_env(allocation)) == {"HIP_VISIBLE_DEVICES", "GPU_PORTAL_ALLOCATION"}


def test_a_slice_of_a_whole_card_vendor_is_refused_and_a_whole_card_placed(bob):
    pool = PoolFactory(cards=online_cards(2, **AMD))
    with pytest.raises(PlacementError, match="whole cards only") as refused:
        placed_lease(pool, bob, compute_pct=50, memory_mib=4096)
    assert refused.value.never
    assert not Lease.objects.exists()
    allocation = placed_lease(pool, bob, whole_card=True).allocations.get()
    assert launch.kubernetes_limits(allocation) == {"amd.com/gpu": 1}


def test_a_mixed_pool_slices_a_named_sliceable_model_only(bob):
    pool = PoolFactory(cards=[*online_cards(1, **AMD), *online_cards(1, **HYGON)])
    with pytest.raises(PlacementError, match="AMD"):
        placed_lease(pool, bob, compute_pct=50, memory_mib=4096)
    lease = placed_lease(pool, bob, compute_pct=50, memory_mib=4096, model="DCU K100_AI")
    assert lease.allocations.get().gpu.vendor == "hygon"


# --- requests ----------------------------------------------------------------------------


@pytest.fixture
def amd_team():
    team = gpu_team("mi")
    amd = PoolFactory(name="amd", cards=online_cards(2, **AMD))
    QuotaFactory(tenant=team.tenant, pool=amd)
    team.amd = amd
    return team


def test_a_slice_request_in_a_whole_card_pool_is_refused_on_the_size(amd_team):
    with pytest.raises(ValidationError) as refused:
        create_request(amd_team.dev, tenant=amd_team.tenant, pool=amd_team.amd, count=1,
                       whole_card=False, compute_pct=50, memory_mib=4096, reason="x")  # fmt: skip
    assert "whole cards only" in refused.value.message_dict["whole_card"][0]
    form = {"tenant": amd_team.tenant.pk, "pool": amd_team.amd.pk, "count": 1, "size": "slice",
            "compute_pct": 50, "memory_mib": 4, "reason": "x"}  # fmt: skip
    page = clients.page(amd_team.dev).post("/requests/new/", form)
    assert page.status_code == 400
    assert "whole cards only" in page.context["form"].errors["size"][0]
    response = clients.api(amd_team.dev).post("/api/v1/gpu-requests/", {
        "tenant": amd_team.tenant.pk, "pool": amd_team.amd.pk, "count": 1, "compute_pct": 50,
        "memory_mib": 4096, "reason": "x"}, format="json")  # fmt: skip
    assert response.status_code == 400 and "whole_card" in error_fields(response)
    assert not GpuRequest.objects.exists()
    # Whole cards of the same pool are asked for as usual.
    form.update(size="whole")
    assert clients.page(amd_team.dev).post("/requests/new/", form).status_code == 302
    assert GpuRequest.objects.get().whole_card


def test_the_request_form_names_pools_and_models_by_vendor(amd_team):
    page = clients.page(amd_team.dev).get("/requests/new/").content.decode()
    assert f'<option value="{amd_team.amd.pk}">amd (AMD)</option>' in page
    assert 'list="gpu-models"' in page
    assert 'value="Arcturus GL-XL [Instinct MI100]" label="AMD · Arcturus GL-XL' in page


def test_the_pool_list_names_each_pools_vendors(amd_team, alice):
    PoolFactory(name="mixed", cards=[*online_cards(1, **ASCEND), *online_cards(2, **HYGON)])
    PoolFactory(name="empty")
    page = clients.page(alice).get("/pools/").content.decode()
    cells = re.findall(r'<td class="pool-vendors">([^<]*)</td>', page)
    # amd, empty, mixed, and the team's NVIDIA pool (named pool-<n>), by name.
    assert cells == ["AMD", "\u2013", "Huawei Ascend, Hygon DCU", "NVIDIA"], cells
    with translation.override("zh-hans"):
        zh = clients.page(alice).get("/pools/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    # In Chinese, with Chinese names and a full-width comma (the ratios too).
    assert "华为昇腾\uff0c海光 DCU" in zh and "\u00d71.00\uff0c" in zh


def test_the_pool_page_names_its_vendors_and_says_whole_cards(amd_team, alice):
    page = clients.page(alice).get(f"/pools/{amd_team.amd.slug}/").content.decode()
    assert "AMD \u00d7 2" in page and "whole cards only" in page
    page = clients.page(alice).get(f"/pools/{amd_team.pool.slug}/").content.decode()
    assert "NVIDIA \u00d7 2" in page and "whole cards only" not in page


def test_an_empty_pool_is_judged_by_its_vendor_rule(bob):
    amd = PoolFactory(match_vendor="amd")
    with pytest.raises(PlacementError, match="whole cards only"):
        placed_lease(amd, bob, compute_pct=50, memory_mib=4096)
    # Cards added by hand are what counts once there are some.
    nvidia = PoolFactory(match_vendor="amd", cards=online_cards(1))
    assert placed_lease(nvidia, bob, compute_pct=50, memory_mib=4096).allocations.count() == 1


# --- asking for a vendor -------------------------------------------------------------------


def test_an_ask_for_a_vendor_lands_on_that_vendors_cards_only(bob):
    pool = PoolFactory(cards=[*online_cards(2), *online_cards(1, **HYGON), *online_cards(1, **AMD)])
    lease = placed_lease(pool, bob, compute_pct=50, memory_mib=4096, vendor="hygon")
    assert lease.gpu_vendor == "hygon"
    assert lease.allocations.get().gpu.vendor == "hygon"
    # The slice refusal reads the named vendor's cards only: AMD's whole cards do not count.
    whole = placed_lease(pool, bob, whole_card=True, vendor="amd").allocations.get()
    assert whole.gpu.vendor == "amd"
    with pytest.raises(PlacementError) as never:
        placed_lease(pool, bob, compute_pct=10, memory_mib=1024, vendor="ascend")
    assert never.value.never  # no Ascend card in this pool could ever hold it


def test_a_request_names_a_vendor_through_form_and_api_and_a_bad_one_is_refused(amd_team):
    hygon = online_cards(1, **HYGON)
    add_cards(amd_team.amd, [g.pk for g in hygon])
    form = {"tenant": amd_team.tenant.pk, "pool": amd_team.amd.pk, "count": 1, "size": "slice",
            "compute_pct": 30, "memory_mib": 4, "reason": "x", "gpu_vendor": "hygon"}  # fmt: skip
    page = clients.page(amd_team.dev).get("/requests/new/").content.decode()
    assert '<option value="ascend">Huawei Ascend</option>' in page
    # A slice in the AMD pool, asked of its Hygon card: taken, not refused.
    assert clients.page(amd_team.dev).post("/requests/new/", form).status_code == 302
    req = GpuRequest.objects.get()
    assert (req.gpu_vendor, req.whole_card) == ("hygon", False)
    bad = clients.page(amd_team.dev).post("/requests/new/", {**form, "gpu_vendor": "biren"})
    assert bad.status_code == 400 and "gpu_vendor" in bad.context["form"].errors
    api = clients.api(amd_team.dev)
    body = {"tenant": amd_team.tenant.pk, "pool": amd_team.amd.pk, "count": 1,
            "compute_pct": 30, "memory_mib": 4096, "reason": "x"}  # fmt: skip
    response = api.post("/api/v1/gpu-requests/", {**body, "gpu_vendor": "biren"}, format="json")
    assert response.status_code == 400 and "gpu_vendor" in error_fields(response)
    response = api.post("/api/v1/gpu-requests/", {**body, "gpu_vendor": "amd"}, format="json")
    assert response.status_code == 400 and "whole_card" in error_fields(response)
    assert GpuRequest.objects.count() == 1
    response = api.post("/api/v1/gpu-requests/", {**body, "gpu_vendor": "hygon"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["gpu_vendor"] == "hygon"
    detail = clients.page(amd_team.dev).get("/requests/").content.decode()
    assert "Hygon DCU" in detail
