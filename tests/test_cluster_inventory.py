"""A cluster's nodes and cards come from the cluster (clusters/inventory.py, docs/kubernetes.md):
its Nodes, HAMi's annotation ``hami.io/node-nvidia-register`` on them, or on a DRA cluster
its driver's ``resource.k8s.io/v1`` ResourceSlices, read by the sync over tests/kube_api.py
with the official client. Every Node and ResourceSlice the tests build is checked against
Kubernetes 1.37's schema first (hostile ones are broken after the check, as a cluster's
own writers could)."""

from __future__ import annotations

import copy
import itertools
import json
import re

import kubernetes_validate
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agents.choices import GpuHealth, NodeSource, NodeState
from agents.interface import SeenCard, record_read_only_node
from agents.models import GPU, Node
from clusters import gates, inventory, sync
from clusters.choices import HAMI_DEVICE_CLASS, NVIDIA_DEVICE_CLASS, Enforcement
from clusters.models import Cluster, ClusterNode, ClusterWorkload
from pools.models import PoolCard
from quotas.choices import RequestState
from telemetry.models import CardClaim
from tests.factories import NodeFactory, gpu_team, online_cards
from tests.kube_world import make_cluster
from tests.test_cluster_gates import pod

pytestmark = pytest.mark.django_db

A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"


def uuid(n: int) -> str:
    return f"GPU-{n:08x}-5c87-89ac-b1a6-7b53aa24b0ec"


def valid(obj: dict) -> dict:
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    return obj


def node(name: str, annotations: dict | None = None, ready: bool = True, **spec) -> dict:
    return valid({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                     **({"annotations": annotations} if annotations else {})},
        "spec": spec,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                   "reason": "KubeletReady"}]},
    })  # fmt: skip


def hami_entry(n: int, memory=81920, health=True, kind=f"NVIDIA-{A100}", index=None) -> dict:
    return {"id": uuid(n), "count": 10, "devmem": memory, "devcore": 100, "type": kind,
            "numa": 0, "mode": "hami-core", "health": health,
            "index": n if index is None else index}  # fmt: skip


def hami_node(name: str, *entries, ready: bool = True) -> dict:
    value = (
        entries[0]
        if len(entries) == 1 and isinstance(entries[0], str)
        else json.dumps(list(entries))
    )
    return node(name, {inventory.HAMI_REGISTER: value}, ready=ready)


def device(n: int, driver: str, memory="80Gi", model=H100, kind=None) -> dict:
    kind = kind or ("hami-gpu" if driver == HAMI_DEVICE_CLASS else "gpu")
    capacity = {"memory": {"value": memory}}
    if driver == HAMI_DEVICE_CLASS:
        capacity["cores"] = {"value": "100"}
    return {"name": f"gpu-{n}",
            "attributes": {"type": {"string": kind}, "uuid": {"string": uuid(n)},
                           "productName": {"string": model}, "index": {"int": n % 8}},
            "capacity": capacity}  # fmt: skip


def resource_slice(node_name: str, driver: str, *devices, generation: int = 1) -> dict:
    return valid({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver}-g{generation}"},
        "spec": {"driver": driver, "nodeName": node_name,
                 "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                 "devices": list(devices)},
    })  # fmt: skip


@pytest.fixture
def team():
    # No card of its own: the pool's cards are the cluster's.
    return gpu_team("acme", cards=0, auto_approve_vgpus=2, auto_approve_compute_pct=50,
                    auto_approve_hours=8)  # fmt: skip


def _pass(cluster: Cluster) -> Cluster:
    sync.sync_cluster(cluster)
    cluster.refresh_from_db()
    return cluster


def _cards(node_name: str) -> dict[str, GPU]:
    return {g.uuid: g for g in GPU.objects.filter(node__hostname=node_name,
                                                   node__source=NodeSource.KUBERNETES)}  # fmt: skip


# --- HAMi ---------------------------------------------------------------------------------


def test_hami_nodes_become_read_only_nodes_with_their_cards_in_the_clusters_pool(team, api):
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1), hami_entry(2, health=False)))
    # HAMi before v2.5: the colon-separated form, 7 and 9 fields.
    v100 = "NVIDIA-Tesla V100-PCIE-32GB"
    legacy = f"{uuid(3)},10,32768,100,{v100},0,true:"
    legacy += f"{uuid(4)},10,32768,100,{v100},0,true,1,hami-core:"
    api.add("nodes", hami_node("gpu-b", legacy))
    api.add("nodes", node("cpu-only"))
    cluster = _pass(cluster)

    assert cluster.inventory_error == ""
    portal = {n.hostname: n for n in Node.objects.filter(source=NodeSource.KUBERNETES)}
    assert set(portal) == {"gpu-a", "gpu-b"}  # a node without GPUs is none of the portal's
    assert portal["gpu-a"].state == NodeState.ONLINE
    assert portal["gpu-a"].labels == {inventory.CLUSTER_LABEL: "prod"}
    a = _cards("gpu-a")
    assert (a[uuid(1)].model, a[uuid(1)].memory_total_mib, a[uuid(1)].index) == (A100, 81920, 1)
    assert a[uuid(1)].health == GpuHealth.OK and a[uuid(2)].health == GpuHealth.UNHEALTHY
    b = _cards("gpu-b")
    assert [(g.model, g.memory_total_mib, g.index) for g in sorted(b.values(), key=str)] == [
        ("Tesla V100-PCIE-32GB", 32768, 0), ("Tesla V100-PCIE-32GB", 32768, 1)]  # fmt: skip
    pooled = PoolCard.objects.filter(gpu__node__source=NodeSource.KUBERNETES)
    assert {c.pool_id for c in pooled} == {team.pool.pk} and pooled.count() == 4
    assert {r.name: r.error for r in ClusterNode.objects.all()} == {"gpu-a": "", "gpu-b": ""}
    assert not [o for o in api.written if o["kind"] in ("Node", "ResourceSlice")]


def test_a_gated_pod_is_placed_on_a_card_the_cluster_reported(team, api):
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(7)))
    cluster = _pass(cluster)
    api.add("pods", valid(pod()))
    gates.pass_cluster(cluster)
    request = ClusterWorkload.objects.get(name="train-1").request
    assert request.state == RequestState.ALLOCATED
    assert [a.gpu.uuid for a in request.lease.allocations.all()] == [uuid(7)]


# --- DRA ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enforcement", "driver"),
    [(Enforcement.DRA_NVIDIA, NVIDIA_DEVICE_CLASS), (Enforcement.DRA_HAMI, HAMI_DEVICE_CLASS)],
)
def test_dra_clusters_read_their_drivers_resource_slices(team, api, enforcement, driver):
    cluster = make_cluster(team, api, enforcement=enforcement)
    api.add("nodes", node("gpu-a"))
    api.add("nodes", node("gpu-b", ready=False))
    api.add("resourceslices", resource_slice(
        "gpu-a", driver, device(1, driver), device(2, driver, memory="81559Mi"),
        # NVIDIA's MIG devices are parts of a card listed beside it: not cards.
        device(9, driver, kind="mig", memory="10Gi"), generation=2))  # fmt: skip
    # An older generation of the same pool is stale; another driver's slice is not ours.
    api.add("resourceslices", resource_slice("gpu-a", driver, device(5, driver), generation=1))
    api.add("resourceslices", resource_slice("gpu-a", "other.example.com", device(6, driver)))
    api.add(
        "resourceslices", resource_slice("gpu-b", driver, device(3, driver, memory="85899345920"))
    )
    cluster = _pass(cluster)

    assert cluster.inventory_error == ""
    a = _cards("gpu-a")
    assert {u: (g.model, g.memory_total_mib) for u, g in a.items()} == {
        uuid(1): (H100, 81920), uuid(2): (H100, 81559)}  # fmt: skip
    assert {u: g.memory_total_mib for u, g in _cards("gpu-b").items()} == {uuid(3): 81920}
    portal = Node.objects.filter(source=NodeSource.KUBERNETES)
    states = dict(portal.values_list("hostname", "state"))
    assert states == {"gpu-a": NodeState.ONLINE, "gpu-b": NodeState.OFFLINE}  # not Ready
    assert Node.objects.get(hostname="gpu-b").last_error == "not Ready in the cluster"
    assert PoolCard.objects.filter(pool=team.pool).count() == 3


# --- a second pass, a card gone -----------------------------------------------------------


_WRITES = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b.*?\b(agents_node|agents_gpu|"
                     r"clusters_clusternode|pools_poolcard)\b", re.I | re.S)  # fmt: skip


def test_a_second_pass_writes_nothing(team, api):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_NVIDIA)
    api.add("nodes", node("gpu-a"))
    api.add("resourceslices", resource_slice("gpu-a", NVIDIA_DEVICE_CLASS,
                                             device(1, NVIDIA_DEVICE_CLASS)))  # fmt: skip
    api.add("nodes", node("bad"))  # refused every pass: its error written once
    api.add(
        "resourceslices",
        resource_slice("bad", NVIDIA_DEVICE_CLASS, device(2, NVIDIA_DEVICE_CLASS, memory="lots")),
    )
    with CaptureQueriesContext(connection) as first:
        cluster = _pass(cluster)
    assert [q for q in first.captured_queries if _WRITES.match(q["sql"])]
    assert ClusterNode.objects.get(name="bad").error
    written = len(api.written)
    with CaptureQueriesContext(connection) as queries:
        _pass(cluster)
    assert [q["sql"][:80] for q in queries.captured_queries if _WRITES.match(q["sql"])] == []
    assert len(api.written) == written


def test_a_card_gone_from_the_cluster_is_kept_and_marked_lost(team, api):
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1), hami_entry(2)))
    _pass(cluster)
    api.edit("nodes", "gpu-a", lambda n: n["metadata"]["annotations"].update(
        {inventory.HAMI_REGISTER: json.dumps([hami_entry(1)])}))  # fmt: skip
    _pass(cluster)
    cards = _cards("gpu-a")
    assert (cards[uuid(1)].health, cards[uuid(2)].health) == (GpuHealth.OK, GpuHealth.LOST)

    # Back again: healthy again, the same row.
    api.edit("nodes", "gpu-a", lambda n: n["metadata"]["annotations"].update(
        {inventory.HAMI_REGISTER: json.dumps([hami_entry(1), hami_entry(2)])}))  # fmt: skip
    _pass(cluster)
    assert _cards("gpu-a")[uuid(2)].pk == cards[uuid(2)].pk
    assert _cards("gpu-a")[uuid(2)].health == GpuHealth.OK

    # The node deleted from the cluster: offline, its cards kept and lost.
    api.objects.pop(("nodes", "", "gpu-a"))
    _pass(cluster)
    portal = Node.objects.get(source=NodeSource.KUBERNETES, hostname="gpu-a")
    assert portal.state == NodeState.OFFLINE
    assert {g.health for g in portal.gpus.all()} == {GpuHealth.LOST}
    assert ClusterNode.objects.get(name="gpu-a").error == "no longer in the cluster"


# --- hostile input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ([hami_entry(1) | {"id": "GPU 1; drop table"}], "Not a card UUID"),
        ([hami_entry(1) | {"id": 17}], "Not a card UUID"),
        ([hami_entry(1, memory="lots")], "devmem must be a whole number"),
        ([hami_entry(1, memory=10**20)], "devmem must be a whole number"),
        ([hami_entry(1, memory=-1)], "devmem must be a whole number"),
        ([hami_entry(1, memory=True)], "devmem must be a whole number"),
        ([hami_entry(1, health="yes")], "health must be true or false"),
        ([hami_entry(1, kind=["A100"])], "type must be text"),
        ([hami_entry(1, kind="A100\x00")], "cannot be shown"),
        ([hami_entry(1, index=10**6)], "index must be a whole number"),
        ([hami_entry(n) for n in range(300)], "300 cards on one node"),
        ([hami_entry(1), hami_entry(1)], "listed twice"),
        ([[1, 2]], "not a list of devices"),
        ({"id": uuid(1)}, "not a list of devices"),
        ("[{", "not valid JSON"),
        ("x" * (70 * 1024), "longer than"),
        (f"{uuid(1)},10,81920:", "has 3 fields"),
    ],
)
def test_a_malformed_hami_node_is_refused_alone(team, api, client, alice, caplog, value, said):
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("good", hami_entry(100)))
    bad = hami_node("bad", hami_entry(200))  # valid first; then written as a cluster could
    bad["metadata"]["annotations"][inventory.HAMI_REGISTER] = (
        value if isinstance(value, str) else json.dumps(value)
    )
    api.add("nodes", bad)
    _pass(cluster)
    assert set(_cards("good")) == {uuid(100)}
    assert not Node.objects.filter(hostname="bad").exists()
    assert said in ClusterNode.objects.get(name="bad").error
    assert "node bad refused" in caplog.text
    client.force_login(alice)
    page = client.get(reverse("clusters:detail", args=[cluster.pk])).content.decode()
    assert 'data-node="bad"' in page and "cluster-node-error" in page


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: d["capacity"]["memory"].update(value="lots"), "capacity memory must be"),
        (lambda d: d["capacity"]["memory"].update(value="1e30"), "capacity memory must be"),
        (lambda d: d["capacity"]["memory"].update(value="-1Gi"), "capacity memory must be"),
        (lambda d: d["capacity"]["memory"].update(value="0.5"), "capacity memory must be"),
        (lambda d: d["capacity"]["memory"].update(value=80), "capacity memory must be"),
        (lambda d: d["capacity"].pop("memory"), "capacity memory must be"),
        (lambda d: d["attributes"].update(uuid={"string": "GPU-\u00e9"}), "Not a card UUID"),
        (lambda d: d["attributes"].update(uuid={"int": 5}), "Not a card UUID"),
        (lambda d: d["attributes"].pop("uuid"), "has no uuid attribute"),
        (lambda d: d["attributes"].update(productName={"string": "x" * 200}), "productName"),
        (lambda d: d["attributes"].update(index={"int": -1}), "index must be"),
        (lambda d: d.update(attributes=[1]), "not an object"),
    ],
)
def test_a_malformed_resource_slice_refuses_its_node_alone(team, api, change, said):
    cluster = make_cluster(team, api, enforcement=Enforcement.DRA_NVIDIA)
    driver = NVIDIA_DEVICE_CLASS
    for name in ("good", "bad"):
        api.add("nodes", node(name))
    api.add("resourceslices", resource_slice("good", driver, device(1, driver)))
    bad = resource_slice("bad", driver, device(2, driver), device(3, driver))
    change(bad["spec"]["devices"][1])
    api.add("resourceslices", bad)
    _pass(cluster)
    assert set(_cards("good")) == {uuid(1)}
    assert _cards("bad") == {}  # none of its cards, not even the fine one
    assert said in ClusterNode.objects.get(name="bad").error


def test_a_node_refused_later_keeps_its_cards_as_they_were(team, api):
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1)))
    _pass(cluster)
    api.edit("nodes", "gpu-a", lambda n: n["metadata"]["annotations"].update(
        {inventory.HAMI_REGISTER: "[{"}))  # fmt: skip
    _pass(cluster)
    assert _cards("gpu-a")[uuid(1)].health == GpuHealth.OK
    assert "not valid JSON" in ClusterNode.objects.get(name="gpu-a").error


def test_a_cluster_whose_nodes_cannot_be_listed_keeps_the_error(team, api):
    cluster = make_cluster(team, api)
    api.forbidden = {"nodes"}
    cluster = _pass(cluster)
    assert cluster.inventory_error.startswith("HTTP 403")
    assert cluster.sync_error == ""  # the quotas are written all the same
    api.forbidden = set()
    api.add("nodes", hami_node("gpu-a", hami_entry(1)))
    assert _pass(cluster).inventory_error == ""


def test_nodes_past_the_cap_are_not_read_and_the_page_says_so(
    team, api, monkeypatch, client, alice
):
    monkeypatch.setattr(inventory, "MAX_NODES", 2)
    cluster = make_cluster(team, api)
    for n in range(3):
        api.add("nodes", hami_node(f"gpu-{n}", hami_entry(n)))
    cluster = _pass(cluster)
    assert "More than 2 nodes" in cluster.inventory_error
    assert Node.objects.filter(source=NodeSource.KUBERNETES).count() == 2
    assert ("GET", "/api/v1/nodes?limit=500") in api.requests
    # A node recorded before and past the cap now is not taken for gone.
    monkeypatch.setattr(inventory, "MAX_NODES", 1)
    _pass(cluster)
    assert set(
        Node.objects.filter(source=NodeSource.KUBERNETES).values_list("state", flat=True)
    ) == {NodeState.ONLINE}
    client.force_login(alice)
    page = client.get(reverse("clusters:detail", args=[cluster.pk])).content.decode()
    assert "cluster-inventory-error" in page and "More than 1 nodes" in page


def _paged(api, size: int) -> None:
    """The server answers lists ``size`` objects at a time with a ``continue`` token, as
    the API server does for ``limit`` (tests/kube_api.py lists all at once)."""
    inner = api.handle

    def handle(method, path, auth, body):
        query = dict(p.split("=", 1) for p in path.partition("?")[2].split("&") if "=" in p)
        code, answer = inner(method, path, auth, body)  # it reads only labelSelector
        if method != "GET" or code != 200 or "items" not in answer or "limit" not in query:
            return code, answer
        start = int(query.get("continue", "0"))
        rest = answer["items"][start:]
        answer["items"] = rest[: min(size, int(query["limit"]))]
        if len(rest) > size:
            answer["metadata"]["continue"] = str(start + size)
        return code, answer

    api.handle = handle


def test_nodes_are_read_a_page_at_a_time(team, api):
    _paged(api, 2)
    cluster = make_cluster(team, api)
    for n in range(5):
        api.add("nodes", hami_node(f"gpu-{n}", hami_entry(n)))
    cluster = _pass(cluster)
    assert cluster.inventory_error == ""
    assert Node.objects.filter(source=NodeSource.KUBERNETES).count() == 5
    pages = [p for m, p in api.requests if p.startswith("/api/v1/nodes?")]
    assert pages == ["/api/v1/nodes?limit=500", "/api/v1/nodes?limit=500&continue=2",
                     "/api/v1/nodes?limit=500&continue=4"]  # fmt: skip


def _endless(api, kind: str) -> None:
    """The server never ends its node list: an empty page with a token, the same token
    again and again, or a fresh token with every page."""
    inner = api.handle
    served = itertools.count()

    def handle(method, path, auth, body):
        code, answer = inner(method, path, auth, body)
        if method != "GET" or not path.startswith("/api/v1/nodes?") or code != 200:
            return code, answer
        n = next(served)
        if n > 50:  # the test's own stop: the portal should have stopped long before
            return code, answer
        if kind == "empty" and n > 0:
            answer["items"] = []
        answer["metadata"]["continue"] = {"empty": "t", "same": "t"}.get(kind, f"t{n}")
        return code, answer

    api.handle = handle


@pytest.mark.parametrize("kind", ["empty", "same", "fresh"])
def test_a_list_that_never_ends_is_read_as_cut_at_its_cap(team, api, kind):
    _endless(api, kind)
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1)))
    cluster = _pass(cluster)
    assert "More than" in cluster.inventory_error
    pages = [p for m, p in api.requests if p.startswith("/api/v1/nodes?")]
    assert len(pages) <= inventory.MAX_NODES // inventory.PAGE + 2
    assert Node.objects.filter(source=NodeSource.KUBERNETES).count() == 1


def test_a_deleted_clusters_nodes_go_offline_and_their_cards_lost(team, api, client, alice):
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1), hami_entry(2)))
    _pass(cluster)
    client.force_login(alice)
    assert client.delete(reverse("api:cluster-detail", args=[cluster.pk])).status_code == 204
    portal = Node.objects.get(source=NodeSource.KUBERNETES)
    assert portal.state == NodeState.OFFLINE and "deleted" in portal.last_error
    assert {g.health for g in _cards("gpu-a").values()} == {GpuHealth.LOST}


def test_a_second_pass_holding_an_old_row_makes_no_second_node(team, api):
    """Two passes at once: the second read the row before the first recorded its node."""
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1)))
    _pass(cluster)
    stale = ClusterNode.objects.get(cluster=cluster)
    stale.node_id = None  # as read before the first pass's commit
    found, _refused = inventory.read_nodes([hami_node("gpu-a", hami_entry(1))], None,
                                           cluster.enforcement)  # fmt: skip
    inventory._record_one(cluster, stale, found["gpu-a"], inventory.Outcome())
    assert Node.objects.filter(source=NodeSource.KUBERNETES).count() == 1
    portal = Node.objects.get(source=NodeSource.KUBERNETES)
    assert ClusterNode.objects.get(cluster=cluster).node_id == portal.pk


# --- one card, two sources ----------------------------------------------------------------


def test_a_card_an_agent_reports_stays_the_agents(team, api):
    agent_card = online_cards(1, uuid=uuid(1))[0]
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1), hami_entry(2)))
    _pass(cluster)
    agent_card.refresh_from_db()
    assert agent_card.node.source == NodeSource.AGENT
    assert set(_cards("gpu-a")) == {uuid(2)}
    assert uuid(1) in ClusterNode.objects.get(name="gpu-a").error


def test_an_agent_reporting_a_clusters_card_takes_it(team, api):
    from telemetry import poller, services

    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1)))
    _pass(cluster)
    agent_node = NodeFactory(state=NodeState.ONLINE, agent_url="http://gpu-a:9400")
    snapshot = {"agent": {"version": "1", "backend": "nvml"}, "hostname": "gpu-a",
                "gpus": [{"index": 0, "uuid": uuid(1), "name": A100,
                          "memory_total_mib": 81920}]}  # fmt: skip
    services.record_poll_results([poller.PollResult(agent_node.pk, snapshot, "", 0.01)])
    card = GPU.objects.get(uuid=uuid(1))
    assert card.node_id == agent_node.pk and not CardClaim.objects.exists()
    _pass(cluster)  # the cluster's next pass leaves it there, and does not call it lost
    card.refresh_from_db()
    assert (card.node_id, card.health) == (agent_node.pk, GpuHealth.OK)


# --- agents' interface --------------------------------------------------------------------


def test_a_read_only_node_takes_a_suffix_when_an_agent_has_its_name():
    NodeFactory(name="gpu-a")
    card = SeenCard(uuid=uuid(1), index=0, model=A100, memory_mib=81920)
    made = record_read_only_node(source=NodeSource.KUBERNETES, node_id=None, name="gpu-a",
                                 name_suffix="@prod", hostname="gpu-a", labels={},
                                 online=True, cards=[card])  # fmt: skip
    assert Node.objects.get(pk=made.node_id).name == "gpu-a@prod"
    again = record_read_only_node(source=NodeSource.KUBERNETES, node_id=made.node_id,
                                  name="gpu-a", name_suffix="@prod", hostname="gpu-a",
                                  labels={}, online=True, cards=[card])  # fmt: skip
    assert (again.node_id, again.created, again.changed, again.node_written) == (
        made.node_id, [], 0, False)  # fmt: skip
    with pytest.raises(ValueError):
        record_read_only_node(source=NodeSource.AGENT, node_id=None, name="x", name_suffix="",
                              hostname="x", labels={}, online=True)  # fmt: skip


# --- the page -----------------------------------------------------------------------------


def test_the_cluster_page_lists_its_nodes_and_cards(team, api, client, alice):
    cluster = make_cluster(team, api)
    api.add("nodes", hami_node("gpu-a", hami_entry(1), hami_entry(2)))
    api.add("nodes", hami_node("gpu-b", hami_entry(3, memory=40960, kind="<b>Bold</b> A100")))
    _pass(cluster)
    client.force_login(alice)
    answer = client.get(reverse("clusters:detail", args=[cluster.pk]))
    page = answer.content.decode()
    assert answer.status_code == 200
    assert 'data-node="gpu-a" data-cards="2"' in page
    times = "\N{MULTIPLICATION SIGN}"
    assert f"2 {times} {A100}, 80.0 GiB each" in page
    assert f"1 {times} &lt;b&gt;Bold&lt;/b&gt; A100, 40.0 GiB" in page and "<b>Bold" not in page


def test_the_page_shows_a_cluster_with_no_gpu_node_yet(team, api, client, alice):
    cluster = make_cluster(team, api)
    client.force_login(alice)
    page = client.get(reverse("clusters:detail", args=[cluster.pk])).content.decode()
    assert "No node with GPUs read yet" in page


def test_node_fixtures_are_kubernetes_objects():
    bad = copy.deepcopy(node("x"))
    bad["spec"]["unschedulable"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, "1.37.0", strict=True)
