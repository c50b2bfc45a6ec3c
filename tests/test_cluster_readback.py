"""What runs is what the portal shows (clusters/readback.py, clusters/devices.py): the gate
pass reads back the cards the cluster gave an admitted workload, HAMi's annotations or the
DRA claims and ResourceSlices, and the request's allocations follow onto them, so the
idle report counts the card the workload really holds for its tenant. Every object of the
test is checked against Kubernetes 1.37's schema, and every object the pass writes."""

from __future__ import annotations

import logging
from datetime import timedelta

import kubernetes_validate
import pytest
from django.urls import reverse
from django.utils import timezone

from agents.choices import GpuHealth, NodeState
from agents.models import GPU, Node
from audit.interface import AuditEntry
from clusters import devices, gates, workloads
from clusters.choices import HAMI_DEVICE_CLASS, Enforcement
from clusters.models import ClusterWorkload, WorkloadState
from pools import services as pool_services
from pools.choices import AllocationState
from pools.interface import Ask, move_allocation
from pools.models import Allocation, PoolCard
from quotas.choices import RequestState
from quotas.requests import services
from reports import scan
from reports.models import AllocationIdle
from telemetry.models import GpuMinute
from tests.factories import PoolFactory, UserFactory, online_cards, placed_lease
from tests.kube_world import NS, make_cluster
from tests.test_cluster_claims import claiming, template
from tests.test_cluster_gates import pod

pytestmark = pytest.mark.django_db
V = "1.37.0"
DRIVER = HAMI_DEVICE_CLASS  # HAMi's DRA driver is named as its device class


def _valid(obj: dict) -> dict:
    kubernetes_validate.validate(obj, V, strict=True)
    return obj


def _written_are_valid(api) -> None:
    for obj in api.written:
        kubernetes_validate.validate(obj, V, strict=True)


def _allocation(name="train-1") -> Allocation:
    req = ClusterWorkload.objects.get(name=name).request
    return Allocation.objects.select_related("gpu").get(lease_id=req.lease_id)


def _other_card(team, *not_these):
    return next(c for c in team.cards if c.pk not in {g.pk for g in not_these})


def _hami_bound(api, name, value, node="gpu-node-a"):
    """What HAMi's scheduler and device plugin write on the Pod once it runs."""

    def change(obj):
        obj["metadata"].setdefault("annotations", {}).update({
            devices.HAMI_ALLOCATED: value, devices.HAMI_NODE: node,
            devices.HAMI_PHASE: devices.HAMI_BOUND, "hami.io/bind-time": "1733600000",
        })  # fmt: skip
        obj["spec"]["nodeName"] = node
        obj["status"] = {"phase": "Running"}

    api.edit("pods", name, change, NS)
    _valid(api.get("pods", name, NS))


def _admitted(team, api, **cluster):
    cluster = make_cluster(team, api, **cluster)
    api.add("pods", _valid(pod()))
    gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED
    return cluster


def test_hami_s_card_is_read_back_and_the_allocation_follows_it(team, api, admin_client):
    cluster = _admitted(team, api)
    placed = _allocation()
    chosen = _other_card(team, placed.gpu)
    _hami_bound(api, "train-1", f"{chosen.uuid},NVIDIA,8192,25:;")
    before = len(api.written)
    gates.pass_cluster(cluster)
    moved = _allocation()
    assert moved.gpu_id == chosen.pk and moved.state == AllocationState.ACTIVE
    assert (moved.compute_pct, moved.memory_mib) == (25, 8192)
    old, new = PoolCard.objects.get(gpu=placed.gpu), PoolCard.objects.get(gpu=chosen)
    assert (old.slices, old.compute_allocated, old.memory_allocated_mib) == (0, 0, 0)
    assert (new.slices, new.compute_allocated, new.memory_allocated_mib) == (1, 25, 8192)
    link = ClusterWorkload.objects.get()
    assert (link.node, link.devices, link.mismatch, link.readback_error) == (
        "gpu-node-a", [chosen.uuid], "", "")  # fmt: skip
    entry = AuditEntry.objects.get(action="allocation.moved")
    assert "read back from cluster prod" in entry.message
    # A second and third pass: nothing moves, nothing is written, here or there.
    updated = link.updated
    gates.pass_cluster(cluster)
    gates.pass_cluster(cluster)
    assert AuditEntry.objects.filter(action="allocation.moved").count() == 1
    assert ClusterWorkload.objects.get().updated == updated
    assert len(api.written) == before
    page = admin_client.get(reverse("clusters:detail", args=[cluster.pk])).content.decode()
    assert chosen.uuid in page and "gpu-node-a" in page
    _written_are_valid(api)


def test_nothing_is_read_until_hami_has_bound_the_pod(team, api):
    cluster = _admitted(team, api)
    placed = _allocation()
    chosen = _other_card(team, placed.gpu)

    def allocating(obj):
        obj["metadata"]["annotations"].update({
            devices.HAMI_ALLOCATED: f"{chosen.uuid},NVIDIA,8192,25:;",
            devices.HAMI_PHASE: "allocating"})  # fmt: skip

    api.edit("pods", "train-1", allocating, NS)
    gates.pass_cluster(cluster)
    assert _allocation().gpu_id == placed.gpu_id
    assert ClusterWorkload.objects.get().devices == []


def test_an_unknown_card_is_recorded_and_shown_and_the_allocation_stays(team, api, admin_client):
    cluster = _admitted(team, api)
    placed = _allocation()
    _hami_bound(api, "train-1", "GPU-deadbeef-0000-0000-0000-000000000000,NVIDIA,8192,25:;")
    gates.pass_cluster(cluster)
    assert _allocation().gpu_id == placed.gpu_id
    link = ClusterWorkload.objects.get()
    assert link.devices == ["GPU-deadbeef-0000-0000-0000-000000000000"]
    assert "not a card of pool" in link.mismatch and team.pool.name in link.mismatch
    page = admin_client.get(reverse("clusters:detail", args=[cluster.pk])).content.decode()
    assert "workload-mismatch" in page and "GPU-deadbeef" in page


def test_a_card_of_another_pool_is_not_followed(team, api):
    cluster = _admitted(team, api)
    placed = _allocation()
    [elsewhere] = online_cards(1)
    PoolFactory(cards=[elsewhere])  # another tenant's pool
    _hami_bound(api, "train-1", f"{elsewhere.uuid},NVIDIA,8192,25:;")
    gates.pass_cluster(cluster)
    assert _allocation().gpu_id == placed.gpu_id
    assert "not a card of pool" in ClusterWorkload.objects.get().mismatch
    assert PoolCard.objects.get(gpu=elsewhere).slices == 0


@pytest.mark.parametrize("how", ["lost", "offline"])
def test_a_lost_card_or_offline_node_is_not_followed_pass_after_pass(team, api, how):
    """Failover moved the slice off a card lost (or its node offline); the cluster still
    reports it there: the books stay, the mismatch says why, no move each pass."""
    cluster = _admitted(team, api)
    placed = _allocation()
    chosen = _other_card(team, placed.gpu)
    if how == "lost":
        GPU.objects.filter(pk=chosen.pk).update(health=GpuHealth.LOST)
    else:
        Node.objects.filter(pk=chosen.node_id).update(state=NodeState.OFFLINE)
    _hami_bound(api, "train-1", f"{chosen.uuid},NVIDIA,8192,25:;")
    for _n in range(2):
        gates.pass_cluster(cluster)
    assert _allocation().gpu_id == placed.gpu_id
    said = ClusterWorkload.objects.get().mismatch
    assert ("not healthy" if how == "lost" else "its node offline") in said
    assert "full" not in said
    assert not AuditEntry.objects.filter(action="allocation.moved").exists()
    assert PoolCard.objects.get(gpu=chosen).slices == 0


def test_move_allocation_says_why_a_card_is_refused(team):
    lease = placed_lease(team.pool, team.dev, compute_pct=60, memory_mib=1024)
    allocation = lease.allocations.get()
    target = _other_card(team, allocation.gpu)
    PoolCard.objects.filter(pool=team.pool, gpu=target).update(cordoned_at=timezone.now())
    why: list[str] = []
    assert move_allocation(allocation.pk, target.pk, "test", why=why) is None
    assert why == ["cordoned"]


def test_a_card_full_in_the_portals_books_keeps_the_allocation_where_it_is(team, api):
    cluster = _admitted(team, api)
    placed = _allocation()
    chosen = _other_card(team, placed.gpu)
    other = UserFactory()
    placed_lease(team.pool, other, whole_card=True, node=chosen.node.name,
                 count=1)  # fmt: skip
    held = Allocation.objects.get(lease__holder=other)
    if held.gpu_id != chosen.pk:  # the whole card went elsewhere: make it the chosen one
        chosen = held.gpu
    _hami_bound(api, "train-1", f"{chosen.uuid},NVIDIA,8192,25:;")
    gates.pass_cluster(cluster)
    assert _allocation().gpu_id == placed.gpu_id
    assert "full in the portal's books" in ClusterWorkload.objects.get().mismatch
    card = PoolCard.objects.get(gpu=chosen)
    assert card.held_whole and card.slices == 1


def test_move_allocation_respects_capacity_and_the_pool(team):
    lease = placed_lease(team.pool, team.dev, compute_pct=60, memory_mib=1024)
    allocation = lease.allocations.get()
    target = _other_card(team, allocation.gpu)
    placed_lease(team.pool, team.dev, compute_pct=60, memory_mib=1024, node=target.node.name)
    crowded = PoolCard.objects.filter(pool=team.pool, compute_allocated=60).exclude(
        gpu=allocation.gpu).first()  # fmt: skip
    assert move_allocation(allocation.pk, crowded.gpu_id, "test") is None  # 60 + 60 > 100
    [outside] = online_cards(1)
    PoolFactory(cards=[outside])
    assert move_allocation(allocation.pk, outside.pk, "test") is None
    empty = PoolCard.objects.filter(pool=team.pool, slices=0).first()
    move = move_allocation(allocation.pk, empty.gpu_id, "test")
    assert move is not None and move.to_gpu_id == empty.gpu_id
    assert move_allocation(allocation.pk, empty.gpu_id, "test") is None  # there already
    assert PoolCard.objects.get(pk=empty.pk).compute_allocated == 60


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{uuid},NVIDIA,8192,25:", "does not end with ';'"),
        ("{uuid},NVIDIA,8192,25;", "do not end with ':'"),
        ("{uuid},NVIDIA,8192:;", "is not uuid,type,memory,cores"),
        ("{uuid},NVIDIA,8Gi,25:;", "device memory must be a whole number"),
        ("{uuid},NVIDIA,8192,250:;", "device cores must be a whole number"),
        ("../../etc,NVIDIA,8192,25:;", "card uuid"),
        ("{uuid},<script>,8192,25:;", "device type"),
        (";;", "names no device"),
        ("{uuid},NVIDIA,1,1:" * 65 + ";", "More than 64 devices"),
        ("x" * 100_000, "longer than 8192 characters"),
        (["{uuid}"], "not text"),
    ],
)
def test_hostile_hami_annotations_are_refused_alone(team, api, caplog, value, said):
    cluster = make_cluster(team, api)
    api.add("pods", pod(name="bad"))
    api.add("pods", pod(name="good"))
    gates.pass_cluster(cluster)
    bad_placed, good_placed = _allocation("bad"), _allocation("good")
    chosen = _other_card(team, bad_placed.gpu, good_placed.gpu)
    if isinstance(value, str):
        value = value.replace("{uuid}", chosen.uuid)
    api.edit("pods", "bad", lambda o: o["metadata"]["annotations"].update(
        {devices.HAMI_ALLOCATED: value, devices.HAMI_PHASE: "success"}), NS)  # fmt: skip
    _hami_bound(api, "good", f"{chosen.uuid},NVIDIA,8192,25:;")
    with caplog.at_level(logging.WARNING, logger="clusters.readback"):
        gates.pass_cluster(cluster)
    bad = ClusterWorkload.objects.get(name="bad")
    assert said in bad.readback_error, bad.readback_error
    assert len(bad.readback_error) <= 2000 and bad.devices == []
    assert _allocation("bad").gpu_id == bad_placed.gpu_id
    assert _allocation("good").gpu_id == chosen.pk  # the other Pod of the pass followed
    assert any("read-back of Pod acme-train/bad refused" in r.getMessage() for r in caplog.records)


def test_a_node_name_that_is_not_one_is_refused(team, api):
    cluster = _admitted(team, api)
    placed = _allocation()
    chosen = _other_card(team, placed.gpu)
    _hami_bound(api, "train-1", f"{chosen.uuid},NVIDIA,8192,25:;")
    api.edit("pods", "train-1", lambda o: o["metadata"]["annotations"].update(
        {devices.HAMI_NODE: "../../node"}), NS)  # fmt: skip
    gates.pass_cluster(cluster)
    assert "is not a valid name" in ClusterWorkload.objects.get().readback_error
    assert _allocation().gpu_id == placed.gpu_id


def test_two_vgpus_on_one_card_are_recorded_not_followed(team, api):
    cluster = make_cluster(team, api)
    api.add("pods", pod(gpus="2"))
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    before = sorted(
        Allocation.objects.filter(lease_id=req.lease_id).values_list("gpu_id", flat=True)
    )
    chosen = next(c for c in team.cards if c.pk not in before)
    _hami_bound(api, "train-1", f"{chosen.uuid},NVIDIA,8192,25:{chosen.uuid},NVIDIA,8192,25:;")
    gates.pass_cluster(cluster)
    after = sorted(
        Allocation.objects.filter(lease_id=req.lease_id).values_list("gpu_id", flat=True)
    )
    assert chosen.pk in after and len(set(after)) == 2  # one followed, one card per vGPU kept
    assert "Runs several vGPUs on" in ClusterWorkload.objects.get().mismatch


def test_plan_keeps_what_matches_and_moves_the_rest_in_order():
    steps = devices.plan(
        [(1, "A"), (2, "B"), (3, None)], ["B", "C", "D", "X"], {"A", "B", "C", "D"}
    )
    assert steps == devices.Plan(moves=((1, "C"), (3, "D")), unknown=("X",), extra=0)
    assert devices.plan([(1, "A")], ["A", "B"], {"A", "B"}).extra == 1


def test_a_jobs_pods_are_read_back_each_to_its_card(team, api):
    cluster = make_cluster(team, api)
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "sweep", "namespace": NS,
                        "annotations": {workloads.DURATION: "2"}},
           "spec": {"parallelism": 2, "template": {"spec": {
               **pod()["spec"], "restartPolicy": "Never"}}}}  # fmt: skip
    api.add("jobs", _valid(job))
    api.play_job_controller()
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get(name="sweep").request
    placed = set(Allocation.objects.filter(lease_id=req.lease_id).values_list("gpu_id", flat=True))
    chosen = [c for c in team.cards if c.pk not in placed][:2]
    job_pods = api.pods_of(api.get("jobs", "sweep", NS))
    for job_pod, card in zip(job_pods, chosen, strict=True):
        _hami_bound(api, job_pod["metadata"]["name"], f"{card.uuid},NVIDIA,8192,25:;")
    gates.pass_cluster(cluster)
    now_on = set(Allocation.objects.filter(lease_id=req.lease_id).values_list("gpu_id", flat=True))
    assert now_on == {c.pk for c in chosen}
    assert sorted(ClusterWorkload.objects.get(name="sweep").devices) == sorted(
        c.uuid for c in chosen)  # fmt: skip


# --- DRA --------------------------------------------------------------------------------


def resource_slice(team, node="gpu-node-a", pool="gpu-node-a") -> dict:
    """What a DRA driver publishes for a node: its cards, each with its uuid."""
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
           "metadata": {"name": f"{node}-{DRIVER}-x1"},
           "spec": {"driver": DRIVER, "nodeName": node,
                    "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"gpu-{i}",
                                 "attributes": {"uuid": {"string": card.uuid},
                                                "index": {"int": i}}}
                                for i, card in enumerate(team.cards)]}}  # fmt: skip
    return _valid(obj)


def allocated_claim(name, owner=None, device="gpu-3", request="gpu", spec=None) -> dict:
    """A ResourceClaim as the DRA scheduler leaves it once it allocated a device."""
    meta = {"name": name, "namespace": NS}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "controller": True,
                                    "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"]}]  # fmt: skip
    spec = spec or {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
        "capacity": {"requests": {"cores": "25", "memory": "8Gi"}}}}]}}  # fmt: skip
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": spec,
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": request,
                            "driver": DRIVER,
                            "pool": "gpu-node-a",
                            "device": device,
                        }
                    ]
                }
            },
            "reservedFor": [
                {
                    "resource": "pods",
                    "name": "train-1",
                    "uid": (owner or {}).get("metadata", {}).get("uid", "u-1"),
                }
            ],
        },
    }
    return _valid(obj)


def _dra_admitted(team, api):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_HAMI)
    api.add("resourceclaimtemplates", template(cores="25", memory="8Gi"))
    api.add("pods", claiming())
    gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED
    return cluster


def _dra_bound(api, claim_name, node="gpu-node-a"):
    """The scheduler bound the Pod: its claim made from the template, allocated."""

    def change(obj):
        obj["spec"]["nodeName"] = node
        obj["status"] = {"phase": "Running", "resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": claim_name}]}  # fmt: skip

    api.edit("pods", "train-1", change, NS)
    _valid(api.get("pods", "train-1", NS))


def test_a_dra_claims_device_is_read_back_through_its_slice(team, api):
    cluster = _dra_admitted(team, api)
    placed = _allocation()
    api.add("resourceslices", resource_slice(team))
    device = next(i for i, c in enumerate(team.cards) if c.pk != placed.gpu_id)
    api.add("resourceclaims", allocated_claim("train-1-gpu-x7k2q", api.get("pods", "train-1", NS),
                                              device=f"gpu-{device}"))  # fmt: skip
    _dra_bound(api, "train-1-gpu-x7k2q")
    gates.pass_cluster(cluster)
    assert _allocation().gpu_id == team.cards[device].pk
    link = ClusterWorkload.objects.get()
    assert (link.node, link.devices, link.mismatch) == ("gpu-node-a", [team.cards[device].uuid], "")
    lists = [p for m, p in api.requests if m == "GET" and p.endswith("/resourceslices")]
    gates.pass_cluster(cluster)  # again: in step, and each list read once a pass
    assert AuditEntry.objects.filter(action="allocation.moved").count() == 1
    assert [p for m, p in api.requests if m == "GET" and p.endswith("/resourceslices")] == lists * 2
    _written_are_valid(api)


@pytest.mark.parametrize(
    ("claim", "said"),
    [
        ({"device": "gpu-99"}, "is in no ResourceSlice"),
        ({"device": "GPU 3!"}, "device 'GPU 3!' is not a valid name"),
    ],
)
def test_a_dra_device_that_cannot_be_read_is_refused_alone(team, api, claim, said):
    cluster = _dra_admitted(team, api)
    placed = _allocation()
    api.add("resourceslices", resource_slice(team))
    bad = allocated_claim("train-1-gpu-x7k2q", api.get("pods", "train-1", NS))
    bad["status"]["allocation"]["devices"]["results"][0].update(claim)
    api.add("resourceclaims", bad)
    _dra_bound(api, "train-1-gpu-x7k2q")
    gates.pass_cluster(cluster)
    assert said in ClusterWorkload.objects.get().readback_error
    assert _allocation().gpu_id == placed.gpu_id


def test_a_released_request_deletes_its_standalone_claim_and_not_the_pods_own(team, api):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_HAMI)
    mine = allocated_claim("my-gpu")
    del mine["status"]  # not allocated yet: the Pod is gated
    api.add("resourceclaims", mine)
    api.add("resourceclaimtemplates", template(name="more", cores="10", memory="1Gi"))
    standalone = claiming(claim={"name": "gpu", "resourceClaimName": "my-gpu"})
    standalone["spec"]["resourceClaims"].append(
        {"name": "more", "resourceClaimTemplateName": "more"}
    )
    api.add("pods", _valid(standalone))
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    assert link.state == WorkloadState.ADMITTED and link.claims == ["my-gpu"]
    assert (link.request.count, link.request.compute_pct, link.request.memory_mib) == (2, 25, 8192)
    owned = allocated_claim("train-1-more-abcde", api.get("pods", "train-1", NS), device="gpu-5")
    api.add("resourceclaims", owned)
    services.end_request(link.request.pk, team.dev)  # allocated: released
    gates.pass_cluster(cluster)
    assert api.get("pods", "train-1", NS) is None
    assert api.get("resourceclaims", "my-gpu", NS) is None
    assert api.get("resourceclaims", "train-1-more-abcde", NS) is not None  # goes with the Pod
    assert ("resourceclaims", NS, "my-gpu", None) in api.deleted
    assert ClusterWorkload.objects.get().state == WorkloadState.ENDED


def test_a_finished_pod_releases_and_deletes_its_standalone_claim(team, api):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_HAMI)
    mine = allocated_claim("my-gpu")
    del mine["status"]
    api.add("resourceclaims", mine)
    api.add("pods", claiming(claim={"name": "gpu", "resourceClaimName": "my-gpu"}))
    gates.pass_cluster(cluster)
    api.edit("pods", "train-1", lambda o: o.update(status={"phase": "Succeeded"}), NS)
    gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get().request.state == RequestState.RELEASED
    assert api.get("resourceclaims", "my-gpu", NS) is None


def test_a_claim_deletion_that_fails_is_done_again_next_pass(team, api):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_HAMI)
    mine = allocated_claim("my-gpu")
    del mine["status"]
    api.add("resourceclaims", mine)
    api.add("pods", claiming(claim={"name": "gpu", "resourceClaimName": "my-gpu"}))
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    services.end_request(link.request.pk, team.dev)
    api.forbidden = {"resourceclaims"}  # the service account lost its right meanwhile
    gates.pass_cluster(cluster)
    link.refresh_from_db()
    assert api.get("pods", "train-1", NS) is None and link.state != WorkloadState.ENDED
    assert "403" in link.error or "Forbidden" in link.error, link.error
    api.forbidden = set()
    gates.pass_cluster(cluster)
    assert api.get("resourceclaims", "my-gpu", NS) is None
    assert ClusterWorkload.objects.get().state == WorkloadState.ENDED


def test_a_hami_cluster_never_touches_claims(team, api):
    cluster = make_cluster(team, api)
    api.add("resourceclaims", allocated_claim("my-gpu"))
    named = pod()
    named["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "my-gpu"}]
    api.add("pods", _valid(named))
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    assert link.state == WorkloadState.ADMITTED and link.claims == []
    services.end_request(link.request.pk, team.dev)
    gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get().state == WorkloadState.ENDED
    assert not [p for _m, p in api.requests if "resourceclaims" in p]


def test_a_standalone_claim_another_consumer_holds_is_neither_sized_nor_deleted(team, api):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_HAMI)
    api.add("resourceclaims", allocated_claim("shared"))  # reserved for another Pod
    api.add("pods", claiming(claim={"name": "gpu", "resourceClaimName": "shared"}))
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    assert link.state == WorkloadState.REFUSED and "in use by another consumer" in link.error
    api.edit("pods", "train-1", lambda o: o.update(status={"phase": "Failed"}), NS)
    gates.pass_cluster(cluster)
    assert api.get("resourceclaims", "shared", NS) is not None


def test_a_job_naming_a_standalone_claim_is_refused_as_shared(team, api):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_HAMI)
    spec = claiming(claim={"name": "gpu", "resourceClaimName": "my-gpu"})["spec"]
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sweep", "namespace": NS},
           "spec": {"template": {"spec": {**spec, "restartPolicy": "Never"}}}}  # fmt: skip
    api.add("jobs", _valid(job))
    gates.pass_cluster(cluster)
    assert "not a shared ResourceClaim" in ClusterWorkload.objects.get().error


# --- what follows from the books ----------------------------------------------------------


def test_the_idle_report_attributes_the_read_back_card_to_the_tenant(team, api, client):
    cluster = _admitted(team, api)
    far = online_cards(2)  # another node of the pool, where the cluster ran it
    pool_services.add_cards(team.pool, [g.pk for g in far])
    _hami_bound(api, "train-1", f"{far[1].uuid},NVIDIA,8192,25:;", node=far[1].node.name)
    gates.pass_cluster(cluster)
    allocation = _allocation()
    assert allocation.gpu_id == far[1].pk
    now = timezone.now().replace(second=0, microsecond=0)
    GpuMinute.objects.bulk_create(
        GpuMinute(gpu=far[1], bucket=now - timedelta(minutes=m), samples=12, util_avg=0,
                  memory_used_avg_mib=0) for m in range(1, 30)
    )  # fmt: skip
    scan.scan(now, p95=False)
    row = AllocationIdle.objects.get(allocation=allocation)
    assert (row.tenant_id, row.node_id, row.pool_id) == (
        team.tenant.pk, far[1].node_id, team.pool.pk)  # fmt: skip
    # And the request's page says where it runs.
    client.force_login(team.admin)
    req = ClusterWorkload.objects.get().request
    page = client.get(reverse("requests:request_detail", args=[req.pk])).content.decode()
    assert far[1].node.name in page


def test_a_placed_lease_elsewhere_is_untouched_by_the_read_back(team, api):
    """Another tenant's slice on the chosen card stays where it is; ours joins it."""
    cluster = _admitted(team, api)
    placed = _allocation()
    chosen = _other_card(team, placed.gpu)
    other = pool_services.place_lease(team.pool, Ask(compute_pct=30, memory_mib=1024,
                                                     node=chosen.node.name),
                                      holder=UserFactory(), unix_user="bob")  # fmt: skip
    theirs = other.allocations.get()
    if theirs.gpu_id != chosen.pk:  # binpack put it beside ours: it moves to the chosen card
        assert move_allocation(theirs.pk, chosen.pk, "test") is not None
        theirs.refresh_from_db()
    _hami_bound(api, "train-1", f"{theirs.gpu.uuid},NVIDIA,8192,25:;")
    gates.pass_cluster(cluster)
    assert _allocation().gpu_id == theirs.gpu_id
    assert Allocation.objects.get(pk=theirs.pk).gpu_id == theirs.gpu_id
    card = PoolCard.objects.get(gpu_id=theirs.gpu_id)
    assert (card.slices, card.compute_allocated) == (2, 55)
