"""The gate pass where a cluster or another pass gets in its way (clusters/gates.py): one
pass per cluster at a time, a link another pass made after this one's list is not ended, a
Jobs list that is forbidden leaves the Pods carried, a Pod of a "Job" that is not batch/v1's
is a workload of its own, a Pod naming an allocated Job asks no more than its template and
no more of them run than the request was sized for, and a Pod gone before its patch is
nothing to stop the rest for."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection
from kubernetes import client as k8s

from clusters import gates, workloads
from clusters.models import ClusterWorkload, WorkloadState
from quotas.choices import RequestState
from tests.kube_world import NS
from tests.test_cluster_gates import pod
from tests.test_cluster_jobs import _cluster, _gated, job

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_second_pass_of_the_same_cluster_waits_its_turn(team, api):
    cluster = _cluster(team, api)
    api.add("pods", pod())
    settings = connection.settings_dict
    other = psycopg.connect(host=settings["HOST"] or "127.0.0.1",
                            port=settings["PORT"] or 5432, user=settings["USER"],
                            dbname=settings["NAME"], autocommit=True)  # fmt: skip
    try:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [gates._LOCK_CLASS, cluster.pk])
        assert gates.pass_cluster(cluster) == {"": gates.BUSY}
        assert not ClusterWorkload.objects.exists()
        other.execute("SELECT pg_advisory_unlock(%s, %s)", [gates._LOCK_CLASS, cluster.pk])
    finally:
        other.close()
    assert gates.pass_cluster(cluster) == {NS: "ok"}
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED


def test_a_link_made_after_the_list_is_not_ended(team, api, monkeypatch):
    cluster = _cluster(team, api)
    listed = gates.Workloads.list

    def list_then_another_pass_admits(self, kind, namespace):
        items = listed(self, kind, namespace)
        if kind == workloads.POD and not ClusterWorkload.objects.exists():
            late = api.add("pods", pod(name="late"))  # made, and admitted, after this list
            mapping = cluster.namespaces.get()
            gates.admit_new(cluster, mapping, {**late, "kind": "Pod"})
        return items

    monkeypatch.setattr(gates.Workloads, "list", list_then_another_pass_admits)
    gates.pass_cluster(cluster)
    late = ClusterWorkload.objects.get(name="late")
    assert late.state == WorkloadState.GATED and late.request.state == RequestState.ALLOCATED
    monkeypatch.undo()
    gates.pass_cluster(cluster)  # the next pass lists it and lifts its gate
    late.refresh_from_db()
    assert late.state == WorkloadState.ADMITTED


def test_a_forbidden_jobs_list_leaves_the_pods_carried(team, api):
    cluster = _cluster(team, api)
    api.add("jobs", job(parallelism=1))
    gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get(kind="Job").state == WorkloadState.ADMITTED
    api.forbidden = {"jobs"}  # the service account lost its rights on Jobs
    api.add("pods", pod())
    result = gates.pass_cluster(cluster)
    assert "403" in result[NS] or "Forbidden" in result[NS]
    assert ClusterWorkload.objects.get(kind="Pod").state == WorkloadState.ADMITTED
    assert ClusterWorkload.objects.get(kind="Job").state == WorkloadState.ADMITTED  # not ended


def test_a_pod_of_another_kind_of_job_is_its_own_workload(team, api):
    cluster = _cluster(team, api)
    volcano = pod(name="vc-0")
    volcano["metadata"]["ownerReferences"] = [{"apiVersion": "batch.volcano.sh/v1alpha1",
                                               "kind": "Job", "name": "vc", "uid": "vc-uid",
                                               "controller": True}]  # fmt: skip
    api.add("pods", volcano)
    gates.pass_cluster(cluster)
    link = ClusterWorkload.objects.get()
    assert (link.kind, link.name, link.state) == ("Pod", "vc-0", WorkloadState.ADMITTED)


def test_a_jobs_pods_are_ungated_only_as_its_template_and_its_parallelism_allow(team, api):
    cluster = _cluster(team, api)
    the_job = api.add("jobs", job(parallelism=1, completions=3))
    api.play_job_controller()
    gates.pass_cluster(cluster)
    assert _gated(api, the_job) == [False]
    [made] = api.pods_of(the_job)
    owner = made["metadata"]["ownerReferences"]
    greedy = pod(name="greedy", gpus="4", mem="40000", cores="100")
    greedy["metadata"]["ownerReferences"] = owner  # forged: asks more than the template
    api.add("pods", greedy)
    twin = pod(name="twin", hours=None)
    twin["spec"] = {**the_job["spec"]["template"]["spec"]}
    twin["metadata"]["ownerReferences"] = owner  # asks as the template, but one runs already
    api.add("pods", twin)
    gates.pass_cluster(cluster)
    assert workloads.is_gated(api.get("pods", "greedy", NS), False)
    assert workloads.is_gated(api.get("pods", "twin", NS), False)
    assert ClusterWorkload.objects.count() == 1  # neither is a request of its own
    api.edit("pods", made["metadata"]["name"], lambda p: p.update(status={"phase": "Succeeded"}),
             namespace=NS)  # fmt: skip
    gates.pass_cluster(cluster)
    assert not workloads.is_gated(api.get("pods", "twin", NS), False)  # room again
    assert workloads.is_gated(api.get("pods", "greedy", NS), False)


def test_a_pod_gone_before_its_patch_stops_no_other(team, api, monkeypatch):
    cluster = _cluster(team, api)
    the_job = api.add("jobs", job(parallelism=2))
    api.play_job_controller()
    gone = api.pods_of(the_job)[0]["metadata"]["name"]
    patch = gates.Workloads.patch

    def patch_unless_gone(self, obj, ops):
        if obj["metadata"]["name"] == gone:
            raise k8s.ApiException(status=404, reason="Not Found")
        return patch(self, obj, ops)

    monkeypatch.setattr(gates.Workloads, "patch", patch_unless_gone)
    gates.pass_cluster(cluster)
    others = [p for p in api.pods_of(the_job) if p["metadata"]["name"] != gone]
    assert [workloads.is_gated(p, False) for p in others] == [False]
    assert ClusterWorkload.objects.get().state == WorkloadState.ADMITTED


def test_a_paused_job_waits_until_it_has_pods_to_run(team, api):
    cluster = _cluster(team, api)
    api.add("jobs", job(parallelism=0))
    gates.pass_cluster(cluster)
    assert not ClusterWorkload.objects.exists()
    api.edit("jobs", "sweep", lambda j: j["spec"].update(parallelism=1), namespace=NS)
    gates.pass_cluster(cluster)
    assert ClusterWorkload.objects.get().request.count == 1


def test_a_passs_own_steps_start_no_pass_in_its_thread(team, api, eager_tasks, monkeypatch):
    """Eager (the embedded default): the notices of the requests a pass makes run inside it,
    on commit; they must not start a pass within the pass."""
    passes = []
    real = gates.pass_cluster
    monkeypatch.setattr(gates, "pass_cluster", lambda c: passes.append(c.pk) or real(c))
    cluster = _cluster(team, api)
    api.add("jobs", job(parallelism=1))
    api.add("pods", pod())
    gates.pass_cluster(cluster)
    assert passes == [cluster.pk]
    assert ClusterWorkload.objects.filter(state=WorkloadState.ADMITTED).count() == 2
