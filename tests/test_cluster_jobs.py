"""Gated Jobs (clusters/gates.py, docs/kubernetes.md): a Job is one request for the Pods it
runs at once, its Pods are never requests of their own, and the gate goes from each Pod the
Job makes while the request holds its GPUs (under Kueue, from the Job). tests/kube_api.py
plays the Job controller (``play_job_controller``) and the garbage collector; every object
the pass writes, and every Job and Pod of the test, is checked against Kubernetes' schema."""

from __future__ import annotations

import kubernetes_validate
import pytest

from clusters import gates, workloads
from clusters.models import ClusterWorkload, WorkloadState
from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests import services
from tests.kube_world import NS, make_cluster

pytestmark = pytest.mark.django_db
_cluster = make_cluster


def job(name="sweep", parallelism=2, completions=None, gpus="1", kueue=False) -> dict:
    """A Job as a developer writes it: the portal's gate in its pod template (or Kueue's
    annotation), HAMi's limits on its container."""
    limits = {"nvidia.com/gpu": gpus, "nvidia.com/gpumem": "8192", "nvidia.com/gpucores": "25"}
    template_spec = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "pytorch:2", "resources": {"limits": limits}}],
    }
    meta = {"name": name, "namespace": NS, "annotations": {workloads.DURATION: "4"}}
    if kueue:
        meta["annotations"][workloads.KUEUE_GATED_BY] = "gpu-portal/approval"
    else:
        template_spec["schedulingGates"] = [{"name": workloads.GATE}]
    spec = {"parallelism": parallelism, "template": {"spec": template_spec}}
    if completions is not None:
        spec["completions"] = completions
    obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    return obj


def _valid(api) -> None:
    for obj in api.written:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


def _gated(api, the_job) -> list[bool]:
    return [workloads.is_gated(p, False) for p in api.pods_of(the_job)]


def _events(api, kind="Job"):
    return [o for (p, _n, _k), o in api.objects.items()
            if p == "events" and o["involvedObject"]["kind"] == kind]  # fmt: skip


def test_a_gated_job_is_one_request_and_each_pod_it_makes_loses_the_gate(team, api):
    cluster = _cluster(team, api)
    the_job = api.add("jobs", job(parallelism=2, completions=3))
    api.play_job_controller()  # its first two Pods, gated by the template
    assert _gated(api, the_job) == [True, True]
    assert gates.pass_cluster(cluster) == {NS: "ok"}
    [link] = ClusterWorkload.objects.all()
    assert (link.kind, link.name, link.uid) == ("Job", "sweep", the_job["metadata"]["uid"])
    req = link.request
    assert (req.count, req.compute_pct, req.memory_mib, req.state) == (
        2, 25, 8192, RequestState.ALLOCATED)  # fmt: skip
    assert "Kubernetes Job acme-train/sweep" in req.reason
    assert _gated(api, the_job) == [False, False]
    assert link.state == WorkloadState.ADMITTED
    assert api.get("jobs", "sweep", NS)["spec"] == the_job["spec"]  # the Job is never patched
    for pod in api.pods_of(the_job):
        assert pod["metadata"]["uid"] not in set(
            ClusterWorkload.objects.values_list("uid", flat=True)
        )  # the Job's Pods are not requests of their own

    # One Pod succeeds; the controller makes the third, gated; the next pass lifts it.
    first = api.pods_of(the_job)[0]
    api.edit("pods", first["metadata"]["name"], lambda p: p.update(status={"phase": "Succeeded"}),
             namespace=NS)  # fmt: skip
    api.play_job_controller()
    assert sorted(_gated(api, the_job)) == [False, False, True]
    gates.pass_cluster(cluster)
    assert _gated(api, the_job) == [False, False, False]
    assert GpuRequest.objects.count() == 1 and ClusterWorkload.objects.count() == 1
    _valid(api)


def test_a_job_beyond_policy_keeps_its_pods_gated_until_approved(team, api):
    cluster = _cluster(team, api)
    the_job = api.add("jobs", job(parallelism=3))  # 3 vGPUs: more than auto-approval allows
    api.play_job_controller()
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    assert req.state == RequestState.PENDING and req.count == 3
    assert _gated(api, the_job) == [True, True, True]
    services.decide(req.pk, team.approver, approve=True)
    services.place_request(req.pk)
    gates.pass_cluster(cluster)
    assert _gated(api, the_job) == [False, False, False]


def test_a_rejected_job_is_told_once_and_its_pods_keep_the_gate(team, api):
    cluster = _cluster(team, api)
    the_job = api.add("jobs", job(parallelism=3))
    api.play_job_controller()
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    services.decide(req.pk, team.approver, approve=False, comment="Too many at once.")
    gates.pass_cluster(cluster)
    gates.pass_cluster(cluster)
    [event] = _events(api)
    assert event["involvedObject"] == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "sweep",
        "namespace": NS,
        "uid": the_job["metadata"]["uid"],
    }
    assert "Too many at once." in event["message"] and "keep their gate" in event["message"]
    assert _gated(api, the_job) == [True, True, True]
    assert ClusterWorkload.objects.get().state == WorkloadState.HELD
    _valid(api)


def test_under_kueue_the_jobs_annotation_is_the_gate(team, api):
    cluster = _cluster(team, api, kueue=True)
    api.add("jobs", job(kueue=True))
    gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get().request.state == RequestState.ALLOCATED
    stored = api.get("jobs", "sweep", NS)
    assert workloads.KUEUE_GATED_BY not in stored["metadata"]["annotations"]
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED
    _valid(api)


def test_a_finished_job_or_pod_releases_its_request(team, api):
    cluster = _cluster(team, api)
    api.add("jobs", job(parallelism=1))
    api.play_job_controller()
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    assert req.state == RequestState.ALLOCATED
    complete = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    api.edit("jobs", "sweep", lambda j: j.update(status=complete), namespace=NS)
    gates.pass_cluster(cluster)
    req.refresh_from_db()
    assert req.state == RequestState.RELEASED  # the GPUs go back to the pool
    assert ClusterWorkload.objects.get().state == WorkloadState.ENDED
    [event] = _events(api)
    assert event["type"] == "Normal" and event["reason"] == "GpuRequestReleased"
    assert "the Job finished" in event["message"]

    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "one-off", "namespace": NS,
                        "annotations": {workloads.DURATION: "2"}},
           "spec": {"schedulingGates": [{"name": workloads.GATE}],
                    "containers": [{"name": "m", "image": "x", "resources": {
                        "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096",
                                   "nvidia.com/gpucores": "20"}}}]}}  # fmt: skip
    api.add("pods", pod)
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get(name="one-off")
    assert link.request.state == RequestState.ALLOCATED
    api.edit("pods", "one-off", lambda p: p.update(status={"phase": "Failed"}), namespace=NS)
    gates.pass_cluster(cluster)
    link.refresh_from_db()
    assert link.request.state == RequestState.RELEASED and link.state == WorkloadState.ENDED
    _valid(api)


def test_a_released_request_deletes_its_job_and_the_jobs_pods(team, api):
    cluster = _cluster(team, api)
    the_job = api.add("jobs", job())
    api.play_job_controller()
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    services.end_request(req.pk, team.dev)  # allocated: released
    gates.pass_cluster(cluster)
    assert api.get("jobs", "sweep", NS) is None
    assert api.deleted[-1] == ("jobs", NS, "sweep", "Background")
    assert api.pods_of(the_job) == []
    assert ClusterWorkload.objects.get().state == WorkloadState.ENDED


def test_a_job_deleted_while_waiting_ends_its_request(team, api):
    cluster = _cluster(team, api)
    api.add("jobs", job(parallelism=3))
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    assert req.state == RequestState.PENDING
    api.objects.pop(("jobs", NS, "sweep"))
    gates.pass_cluster(cluster)
    req.refresh_from_db()
    assert req.state == RequestState.CANCELLED


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"parallelism": 40, "gpus": "2"}, "80 vGPUs asked: at most 64"),
        ({"parallelism": -1}, "parallelism must be a whole number from 1 to 64"),
        ({"parallelism": "two"}, "parallelism must be a whole number"),
        ({"parallelism": 10**12}, "parallelism must be a whole number"),
    ],
)
def test_a_job_that_cannot_be_sized_is_refused_and_told(team, api, spec, said):
    cluster = _cluster(team, api)
    hostile = job(parallelism=1, gpus=spec.get("gpus", "1"))
    hostile["spec"]["parallelism"] = spec["parallelism"]  # what no schema check stopped
    api.add("jobs", hostile)
    api.add("jobs", job(name="fine", parallelism=1))
    gates.pass_cluster(cluster)
    gates.pass_cluster(cluster)
    refused = ClusterWorkload.objects.get(name="sweep")
    assert refused.state == WorkloadState.REFUSED and said in refused.error
    assert refused.request is None
    [event] = _events(api)
    assert event["reason"] == "GpuRequestRefused" and said in event["message"]
    assert ClusterWorkload.objects.get(name="fine").state == WorkloadState.ADMITTED
    _valid(api)


def test_an_idle_workload_is_warned_then_evicted_with_notice(
    team, api, django_capture_on_commit_callbacks
):
    """Reports' reclaim (the idle scan's verdicts, the pool's policy) reaches the cluster:
    the workload is told by an Event when warned, and deleted once its grace has passed."""
    from datetime import timedelta

    from django.utils import timezone

    from pools.models import Lease
    from reports import services as reclaim
    from reports.models import AllocationIdle, ReclaimPolicy

    cluster = _cluster(team, api)
    the_job = api.add("jobs", job(parallelism=1))
    api.play_job_controller()
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    ReclaimPolicy.objects.create(pool=team.pool, reclaim=True, grace_hours=2)
    now = timezone.now()
    lease = Lease.objects.get(pk=req.lease_id)
    for allocation in lease.allocations.all():  # what the idle scan writes for unused cards
        AllocationIdle.objects.create(
            allocation=allocation, lease=lease, pool=team.pool, tenant_id=req.tenant_id,
            idle=True, scanned_at=now,
        )  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.reclaim(now)["warned"] == 1
    gates.pass_cluster(cluster)
    gates.pass_cluster(cluster)  # told once
    [warned] = _events(api)
    assert warned["reason"] == "GpuRequestReclaimWarning" and warned["type"] == "Warning"
    assert "has been idle" in warned["message"] and "the Job is deleted" in warned["message"]
    assert api.get("jobs", "sweep", NS) is not None

    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.reclaim(now + timedelta(hours=2, seconds=1))["released"] == 1
    gates.pass_cluster(cluster)
    assert api.get("jobs", "sweep", NS) is None and api.pods_of(the_job) == []
    reasons = [e["reason"] for e in _events(api)]
    assert sorted(reasons) == ["GpuRequestReclaimWarning", "GpuRequestReclaimed"]
    assert ClusterWorkload.objects.get().state == WorkloadState.ENDED
    _valid(api)


def test_an_approval_runs_the_clusters_pass_at_once(
    team, api, eager_tasks, django_capture_on_commit_callbacks, monkeypatch
):
    """No waiting for the next round (CLUSTER_GATE_EVERY_S): the request's step, sent after
    commit, runs its cluster's pass, which lifts the gate of the Job's Pods."""
    passes = []
    real = gates.pass_cluster
    monkeypatch.setattr(gates, "pass_cluster", lambda c: passes.append(c.pk) or real(c))
    cluster = _cluster(team, api)
    the_job = api.add("jobs", job(parallelism=3))
    api.play_job_controller()
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    assert _gated(api, the_job) == [True, True, True]
    with django_capture_on_commit_callbacks(execute=True):
        services.decide(req.pk, team.approver, approve=True)
    assert 2 <= len(passes) <= 3  # the first, then approved and placed: each step's, eager
    assert _gated(api, the_job) == [False, False, False]
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED


def test_a_burst_of_steps_asks_for_one_pass(team, api, monkeypatch):
    """On a worker (the notice task sends the steps, no pass runs in its thread) a burst of
    steps queues one pass, which runs once the burst is in; steps after it starts ask again."""
    from django.core.cache import cache

    from clusters import receivers, tasks

    cluster = _cluster(team, api)
    api.add("jobs", job(parallelism=3))
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    queued = []
    monkeypatch.setattr(tasks.pass_cluster_workloads, "apply_async",
                        lambda args, countdown: queued.append((args, countdown)))  # fmt: skip
    cache.delete(tasks.pass_asked_key(cluster.pk))
    for _step in range(3):
        receivers.request_step(sender=None, request_id=req.pk)
    assert queued == [((cluster.pk,), tasks.PASS_DEBOUNCE_S / 2)]
    tasks.pass_cluster_workloads.run(cluster.pk)  # the queued pass starts
    receivers.request_step(sender=None, request_id=req.pk)
    assert len(queued) == 2


def test_a_pass_for_a_cluster_gone_is_nothing():
    from clusters.tasks import pass_cluster_workloads

    assert pass_cluster_workloads(10**9) == {}


def test_a_withdrawn_warning_then_a_release_is_no_eviction(
    team, api, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    from pools.models import Lease
    from reports import services as reclaim
    from reports.models import AllocationIdle, ReclaimPolicy

    cluster = _cluster(team, api)
    api.add("jobs", job(parallelism=1))
    gates.pass_cluster(cluster)
    req = ClusterWorkload.objects.get().request
    ReclaimPolicy.objects.create(pool=team.pool, reclaim=True, grace_hours=2)
    lease = Lease.objects.get(pk=req.lease_id)
    rows = [AllocationIdle.objects.create(
        allocation=a, lease=lease, pool=team.pool, tenant_id=req.tenant_id, idle=True,
        scanned_at=timezone.now()) for a in lease.allocations.all()]  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        reclaim.reclaim(timezone.now())
    gates.pass_cluster(cluster)
    for row in rows:  # busy again: the warning is withdrawn
        AllocationIdle.objects.filter(pk=row.pk).update(idle=False)
    with django_capture_on_commit_callbacks(execute=True):
        assert reclaim.reclaim(timezone.now())["withdrawn"] == 1
    services.end_request(req.pk, team.dev)  # its owner releases it later, as any request
    gates.pass_cluster(cluster)
    assert [e["reason"] for e in _events(api)] == ["GpuRequestReclaimWarning"]
    assert api.get("jobs", "sweep", NS) is None  # released: deleted, but not "taken back"
