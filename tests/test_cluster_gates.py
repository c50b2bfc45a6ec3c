"""Gated Pods become GPU requests (clusters/gates.py, docs/kubernetes.md): the pass over
tests/kube_api.py with the official client, every object it writes checked against
Kubernetes' own schema."""

from __future__ import annotations

import logging

import kubernetes_validate
import pytest

from audit.interface import AuditEntry
from clusters import gates, workloads
from clusters.models import ClusterWorkload, WorkloadState
from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests import services
from tests.kube_world import NS, make_cluster

pytestmark = pytest.mark.django_db
_cluster = make_cluster


def pod(
    name="train-1", namespace=NS, gpus="1", mem="8192", cores="25", hours="4", kueue=False, **extra
) -> dict:
    limits = {"nvidia.com/gpu": gpus}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    meta = {"name": name, "namespace": namespace,
            "annotations": {workloads.DURATION: hours} if hours else {}}  # fmt: skip
    spec = {"containers": [{"name": "main", "image": "pytorch:2", "resources": {"limits": limits}}]}
    if kueue:
        meta["annotations"][workloads.KUEUE_GATED_BY] = "other.io/check,gpu-portal/approval"
    else:
        spec["schedulingGates"] = [{"name": "other.io/wait"}, {"name": workloads.GATE}]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    for key, value in extra.items():
        obj[key] = value
    return obj


def _written_are_valid(api) -> None:
    for obj in api.written:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


def _gate_names(api, name="train-1"):
    return [g["name"] for g in api.get("pods", name, NS)["spec"].get("schedulingGates", [])]


def _events(api, name="train-1"):
    return [o for (p, _n, _k), o in api.objects.items()
            if p == "events" and o["involvedObject"]["name"] == name]  # fmt: skip


def test_a_gated_pod_within_policy_becomes_a_request_and_loses_its_gate(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod())
    assert gates.pass_cluster(cluster) == {NS: "ok"}
    link = ClusterWorkload.objects.get()
    req = link.request
    assert (req.tenant, req.pool, req.count, req.compute_pct, req.memory_mib) == (
        team.tenant, team.pool, 1, 25, 8192)  # fmt: skip
    assert req.duration_hours == 4 and req.state == RequestState.ALLOCATED
    assert req.requester.memberships.get().tenant == team.tenant
    assert not req.requester.has_usable_password()
    assert AuditEntry.objects.filter(action="cluster.requester_made").count() == 1
    assert link.state == WorkloadState.ADMITTED and link.uid == api.get("pods", "train-1", NS)[
        "metadata"]["uid"]  # fmt: skip
    assert _gate_names(api) == ["other.io/wait"]  # exactly the portal's gate went
    _written_are_valid(api)


def test_a_second_pass_creates_nothing_new(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod())
    gates.pass_cluster(cluster)
    before = len(api.written)
    gates.pass_cluster(cluster)
    gates.pass_cluster(cluster)
    assert GpuRequest.objects.count() == 1 and ClusterWorkload.objects.count() == 1
    assert len(api.written) == before


def test_a_pod_beyond_policy_waits_gated_until_approved(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod(cores="75"))  # 75 %: more than auto-approval allows
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    assert req.state == RequestState.PENDING and workloads.GATE in _gate_names(api)
    gates.pass_cluster(cluster)
    assert workloads.GATE in _gate_names(api)
    services.decide(req.pk, team.approver, approve=True)
    services.place_request(req.pk)  # what the commit runs after the decision
    gates.pass_cluster(cluster)
    assert _gate_names(api) == ["other.io/wait"]
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED


def test_rejection_tells_the_pod_why_and_keeps_its_gate(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod(cores="75"))
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    services.decide(req.pk, team.approver, approve=False, comment="Use the small pool.")
    gates.pass_cluster(cluster)
    gates.pass_cluster(cluster)  # told once
    (event,) = _events(api)
    assert event["reason"] == "GpuRequestRejected" and event["type"] == "Warning"
    assert "Use the small pool." in event["message"] and "keeps its gate" in event["message"]
    assert event["involvedObject"]["uid"] == api.get("pods", "train-1", NS)["metadata"]["uid"]
    assert workloads.GATE in _gate_names(api)
    assert ClusterWorkload.objects.get().state == WorkloadState.HELD
    _written_are_valid(api)


def test_a_cancelled_request_is_told_and_a_released_one_deletes_its_pod(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod(name="waits", cores="75"))
    api.add("pods", pod(name="runs"))
    gates.pass_cluster(cluster)
    waits = ClusterWorkload.objects.get(name="waits").request
    runs = ClusterWorkload.objects.get(name="runs").request
    services.end_request(waits.pk, team.dev)  # pending: cancelled
    services.end_request(runs.pk, team.dev)  # allocated: released
    gates.pass_cluster(cluster)
    assert [e["reason"] for e in _events(api, "waits")] == ["GpuRequestCancelled"]
    assert api.get("pods", "runs", NS) is None
    assert ClusterWorkload.objects.get(name="runs").state == WorkloadState.ENDED
    _written_are_valid(api)


def test_a_conflict_on_the_patch_is_read_again_and_retried(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod())
    seen = []

    def another_writer(stored):  # a label added between our read and our patch, once
        seen.append(1)
        if len(seen) > 1:
            return False
        stored["metadata"].setdefault("labels", {})["someone"] = "else"
        return True

    api.before_patch = another_writer
    gates.pass_cluster(cluster)
    patches = [r for r in api.requests if r[0] == "PATCH"]
    assert len(patches) == 2
    stored = api.get("pods", "train-1", NS)
    assert _gate_names(api) == ["other.io/wait"] and stored["metadata"]["labels"]["someone"]


def test_a_gate_removed_by_someone_else_is_fine(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod(cores="75"))
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    services.decide(req.pk, team.approver, approve=True)
    services.place_request(req.pk)
    # Someone takes the gate off after the list and before our patch: the test fails (422),
    # the Pod is read again and has no gate left; no error.
    api.before_patch = lambda stored: bool(stored["spec"].update(schedulingGates=[]) or True)
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    assert link.state == WorkloadState.ADMITTED and not link.error
    # Removed twice (a second pass, or a pass after a lost worker): still fine.
    assert gates.remove_gate(gates.Workloads(gates.Kube(gates.api_client(cluster))),
                             api.get("pods", "train-1", NS), kueue=False)  # fmt: skip


def test_under_kueue_the_annotation_entry_is_the_gate(team, api):
    cluster = _cluster(team, api, kueue=True)
    api.add("pods", pod(kueue=True))
    api.add("pods", pod(name="plain"))  # a scheduling gate alone is not Kueue's gate
    gates.pass_cluster(cluster)
    (link,) = ClusterWorkload.objects.all()
    assert link.name == "train-1" and link.state == WorkloadState.ADMITTED
    annotations = api.get("pods", "train-1", NS)["metadata"]["annotations"]
    assert annotations[workloads.KUEUE_GATED_BY] == "other.io/check"
    _written_are_valid(api)


def test_a_pod_in_an_unmapped_namespace_is_ignored(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod(namespace="elsewhere"))
    assert gates.pass_cluster(cluster) == {NS: "ok"}
    assert not ClusterWorkload.objects.exists() and not GpuRequest.objects.exists()
    assert not [r for r in api.requests if "elsewhere" in r[1]]


HOSTILE = {
    "huge count": {"gpus": "99999999999999999999"},
    "a quantity with a unit": {"mem": "8Gi"},
    "a fraction": {"gpus": "0.5"},
    "cores past 100": {"cores": "250"},
    "a negative": {"gpus": "-1"},
    "an hour count too large": {"hours": "100000000"},
    "no gpu at all": {"gpus": None},
    "cores without memory": {"mem": None},
}


@pytest.mark.parametrize("bad", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_malformed_pod_is_refused_alone_and_told(team, api, caplog, bad):
    cluster = _cluster(team, api)
    spec = pod(name="bad", **{k: v for k, v in bad.items() if k != "gpus" or v is not None})
    if bad.get("gpus", "") is None:
        spec["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpu")
    api.add("pods", spec)
    api.add("pods", pod(name="good"))
    with caplog.at_level(logging.WARNING, logger="clusters.gates"):
        gates.pass_cluster(cluster)
    bad_link = ClusterWorkload.objects.get(name="bad")
    assert bad_link.state == WorkloadState.REFUSED and bad_link.request is None
    assert bad_link.error and "Pod acme-train/bad refused" in caplog.text
    assert ClusterWorkload.objects.get(name="good").state == WorkloadState.ADMITTED
    (event,) = _events(api, "bad")
    assert event["reason"] == "GpuRequestRefused" and event["message"] == bad_link.error
    _written_are_valid(api)


def test_pods_with_missing_fields_are_skipped_and_the_rest_go_on(team, api, caplog):
    cluster = _cluster(team, api)
    api.add("pods", {"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "no-spec", "namespace": NS}})  # fmt: skip
    api.add("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "odd", "namespace": NS, "annotations": ["not", "a", "map"]},
        "spec": {"schedulingGates": [{"name": workloads.GATE}], "containers": "nope"}})  # fmt: skip
    api.add("pods", pod(name="good"))
    with caplog.at_level(logging.WARNING, logger="clusters.gates"):
        gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get(name="odd").state == WorkloadState.REFUSED
    assert not ClusterWorkload.objects.filter(name="no-spec").exists()  # not gated
    assert ClusterWorkload.objects.get(name="good").state == WorkloadState.ADMITTED


def test_over_quota_is_refused_and_told(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod(gpus="9", mem=None, cores=None))  # 9 whole cards: past the limit of 8
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    assert link.state == WorkloadState.REFUSED and "quota" in link.error
    assert _events(api)[0]["reason"] == "GpuRequestRefused"


def test_a_list_that_fails_is_reported_and_the_next_pass_resumes(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod())
    api.fail_lists = 1
    result = gates.pass_cluster(cluster)
    assert result[NS].startswith("HTTP 500") and not ClusterWorkload.objects.exists()
    assert gates.pass_cluster(cluster) == {NS: "ok"}
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED


def test_a_pod_deleted_while_waiting_ends_its_request(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod(cores="75"))
    gates.pass_cluster(cluster)
    api.objects.pop(("pods", NS, "train-1"))
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    assert link.state == WorkloadState.ENDED
    assert link.request.state == RequestState.CANCELLED


def test_the_beat_runs_the_pass(settings):
    from portal.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["gate-cluster-workloads"]
    assert entry["task"] == "clusters.tasks.pass_gated_workloads"
    task = app.tasks["clusters.tasks.pass_gated_workloads"]
    assert task.acks_late and task.reject_on_worker_lost
