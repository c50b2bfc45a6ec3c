"""On a DRA cluster a workload is sized by the ResourceClaimTemplates its Pods claim
devices through (clusters/workloads.py): ``capacity.requests`` of the cluster's device
class, HAMi's (``cores``, ``memory``) or NVIDIA's (``memory``). Templates, Pods and Jobs of
the test are checked against Kubernetes 1.37's schema, as is every object the pass writes."""

from __future__ import annotations

import kubernetes_validate
import pytest

from clusters import gates, workloads
from clusters.choices import HAMI_DEVICE_CLASS, NVIDIA_DEVICE_CLASS, Enforcement
from clusters.models import ClusterWorkload, WorkloadState
from quotas.choices import RequestState
from tests.kube_world import NS, make_cluster

pytestmark = pytest.mark.django_db


def _cluster(team, api, enforcement=Enforcement.DRA_HAMI):
    return make_cluster(team, api, enforcement=enforcement)


def template(name="one-slice", device_class=HAMI_DEVICE_CLASS, count=1, **capacity) -> dict:
    exactly = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    devices = {"requests": [{"name": "gpu", "exactly": exactly}]}
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"spec": {"devices": devices}}}  # fmt: skip
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    return obj


def claiming(name="train-1", claim=None) -> dict:
    claim = claim or {"name": "gpu", "resourceClaimTemplateName": "one-slice"}
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": NS,
                        "annotations": {workloads.DURATION: "4"}},
           "spec": {"schedulingGates": [{"name": workloads.GATE}], "resourceClaims": [claim],
                    "containers": [{"name": "main", "image": "pytorch:2",
                                    "resources": {"claims": [{"name": "gpu"}]}}]}}  # fmt: skip
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    return obj


def _request(name="train-1"):
    return ClusterWorkload.objects.get(name=name).request


def test_a_pod_claiming_a_hami_slice_asks_for_that_slice(team, api):
    cluster = _cluster(team, api)
    api.add("resourceclaimtemplates", template(cores="25", memory="8Gi"))
    api.add("pods", claiming())
    gates.pass_cluster(cluster)
    req = _request()
    assert (req.count, req.compute_pct, req.memory_mib, req.whole_card) == (1, 25, 8192, False)
    assert req.state == RequestState.ALLOCATED
    assert api.get("pods", "train-1", NS)["spec"].get("schedulingGates", []) == []
    for obj in api.written:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


def test_a_job_claiming_through_a_template_asks_per_pod_it_runs(team, api):
    cluster = _cluster(team, api)
    api.add("resourceclaimtemplates", template(count=1, cores="20", memory="4096Mi"))
    pod = claiming()
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "sweep", "namespace": NS, "annotations": {workloads.DURATION: "2"}},
           "spec": {"parallelism": 2,
                    "template": {"spec": {**pod["spec"], "restartPolicy": "Never"}}}}  # fmt: skip
    kubernetes_validate.validate(job, "1.37.0", strict=True)
    api.add("jobs", job)
    gates.pass_cluster(cluster)
    req = _request("sweep")
    assert (req.count, req.compute_pct, req.memory_mib) == (2, 20, 4096)


def test_nvidias_class_shares_memory_only(team, api):
    cluster = _cluster(team, api, Enforcement.DRA_NVIDIA)
    api.add("resourceclaimtemplates", template(device_class=NVIDIA_DEVICE_CLASS, memory="20Gi"))
    api.add("pods", claiming())
    gates.pass_cluster(cluster)
    req = _request()
    assert (req.count, req.compute_pct, req.memory_mib, req.whole_card) == (1, 100, 20480, False)


@pytest.mark.parametrize(
    ("parts", "said"),
    [
        ({"memory": "8.5Mi"}, "capacity memory must be a whole number of MiB"),
        ({"memory": "1e30"}, "capacity memory must be a whole number of MiB"),
        ({"memory": "-1Gi"}, "capacity memory must be a whole number of MiB"),
        ({"memory": "lots"}, "capacity memory must be a whole number of MiB"),
        ({"memory": "8Gi", "cores": "250m"}, "capacity cores must be a whole number"),
        ({"cores": "25"}, "without it HAMi gives the whole card's memory"),
        ({"count": 65}, "count must be a whole number from 1 to 64"),
        ({"device_class": NVIDIA_DEVICE_CLASS}, "No claim asks for a device of class"),
        ({"missing": True}, "ResourceClaimTemplate one-slice not found"),
        ({"shared": True}, "ResourceClaim shared-one not found"),
        ({"all": True}, "exact count of devices"),
    ],
)
def test_a_claim_that_cannot_be_sized_is_refused_alone_and_told(team, api, parts, said):
    cluster = _cluster(team, api)
    parts = dict(parts)
    if not parts.pop("missing", False):
        bad = template(device_class=parts.pop("device_class", HAMI_DEVICE_CLASS),
                       count=parts.pop("count", 1) if "count" in parts else 1)  # fmt: skip
        asks = {k: v for k, v in parts.items() if k in ("memory", "cores")}
        exactly = bad["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        if asks:
            exactly["capacity"] = {"requests": asks}  # what no schema check stopped
        if parts.get("all"):
            exactly["allocationMode"] = "All"
            exactly.pop("count")
        api.add("resourceclaimtemplates", bad)
    claim = {"name": "gpu", "resourceClaimName": "shared-one"} if parts.get("shared") else None
    api.add("pods", claiming(claim=claim))
    api.add("resourceclaimtemplates", template(name="fine", cores="25", memory="8Gi"))
    api.add("pods", claiming(name="good", claim={"name": "gpu",
                                                 "resourceClaimTemplateName": "fine"}))  # fmt: skip
    gates.pass_cluster(cluster)
    refused = ClusterWorkload.objects.get(name="train-1")
    assert refused.state == WorkloadState.REFUSED and said in refused.error, refused.error
    assert ClusterWorkload.objects.get(name="good").state == WorkloadState.ADMITTED
    gates.pass_cluster(cluster)
    told = [o for (p, _n, _k), o in api.objects.items()
            if p == "events" and o["involvedObject"]["name"] == "train-1"]  # fmt: skip
    assert [e["reason"] for e in told] == ["GpuRequestRefused"]


def test_a_hami_cluster_ignores_claims_and_reads_the_limits(team, api):
    cluster = _cluster(team, api, Enforcement.HAMI)
    pod = claiming()
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048", "nvidia.com/gpucores": "10"}
    }
    api.add("pods", pod)
    gates.pass_cluster(cluster)
    req = _request()
    assert (req.count, req.compute_pct, req.memory_mib) == (1, 10, 2048)
    assert not [path for _method, path in api.requests if "resourceclaimtemplates" in path]
