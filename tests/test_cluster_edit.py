"""A cluster changed and deleted, a namespace unmapped (clusters/services.py, the pages and
the API; docs/kubernetes.md): platform admins only; the token changes only when a new one
is given; what a workload holding a request depends on (the mode, the cluster, its
namespace) waits until no workload holds one; an unmapping reaches the cluster through the
sync queued once it commits (tests/kube_api.py as the cluster, Celery eager)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from clusters.models import Cluster, ClusterWorkload, NamespaceMapping
from clusters.services import map_namespace
from quotas.choices import RequestState
from quotas.requests.lifecycle import release_request
from quotas.requests.services import create_request
from tests.kube_world import NS, TOKEN, make_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(team, api):
    return make_cluster(team, api)


def _holding(team, cluster, namespace=NS) -> ClusterWorkload:
    """A workload of the cluster whose request holds its GPUs."""
    req = create_request(team.dev, **team.ask(duration_hours=2))
    assert req.state == RequestState.ALLOCATED
    return ClusterWorkload.objects.create(cluster=cluster, namespace=namespace, kind="Job",
                                          name="train", uid="uid-1", request=req)  # fmt: skip


def _api(client, method, url, body=None):
    return getattr(client, method)(url, body, content_type="application/json")


def test_the_api_changes_a_cluster_and_keeps_its_token_unless_given(client, alice, cluster):
    client.force_login(alice)
    url = reverse("api:cluster-detail", args=[cluster.pk])
    answer = _api(client, "patch", url, {"api_url": "https://k8s-2.example.com", "pool": 999})
    assert answer.status_code == 200, answer.content
    cluster.refresh_from_db()
    assert cluster.api_url == "https://k8s-2.example.com" and cluster.token == TOKEN
    hint = cluster.token_hint
    body = {"name": "prod-2", "api_url": "https://k8s-3.example.com", "ca_bundle": "",
            "enforcement": "hami", "kueue": True, "token": "a-new-token-9876543210"}  # fmt: skip
    answer = _api(client, "put", url, body)
    assert answer.status_code == 200, answer.content
    assert "token" not in answer.json() and "a-new-token" not in answer.content.decode()
    cluster.refresh_from_db()
    assert (cluster.name, cluster.kueue, cluster.token) == ("prod-2", True, body["token"])
    assert cluster.token_hint != hint
    entries = AuditEntry.objects.filter(action="cluster.updated")
    assert entries.count() == 2 and "a-new-token" not in str(list(entries.values()))


def test_a_bad_change_is_a_400_and_changes_nothing(client, alice, cluster):
    client.force_login(alice)
    url = reverse("api:cluster-detail", args=[cluster.pk])
    for body in ({"api_url": "not a url"}, {"ca_bundle": "not pem"}, {"enforcement": "magic"}):
        answer = _api(client, "patch", url, body)
        assert answer.status_code == 400, body
        assert set(body) <= set(answer.json()["error"]["fields"])
    assert Cluster.objects.get().api_url == cluster.api_url


def test_the_mode_waits_while_a_workload_holds_a_request(client, alice, team, cluster):
    link = _holding(team, cluster)
    client.force_login(alice)
    url = reverse("api:cluster-detail", args=[cluster.pk])
    answer = _api(client, "patch", url, {"kueue": True})
    assert answer.status_code == 400
    assert "1 workload" in answer.json()["error"]["fields"]["kueue"][0]
    assert _api(client, "patch", url, {"name": "renamed"}).status_code == 200  # not the mode
    release_request(link.request_id, team.dev)
    assert _api(client, "patch", url, {"kueue": True}).status_code == 200
    assert Cluster.objects.get().kueue


def test_a_cluster_is_deleted_only_once_no_workload_holds_a_request(client, alice, team, cluster):
    link = _holding(team, cluster)
    client.force_login(alice)
    url = reverse("api:cluster-detail", args=[cluster.pk])
    refused = client.delete(url)
    assert refused.status_code == 409 and "release" in refused.json()["error"]["message"]
    assert Cluster.objects.exists()
    release_request(link.request_id, team.dev)
    assert client.delete(url).status_code == 204
    assert not Cluster.objects.exists() and not NamespaceMapping.objects.exists()
    assert AuditEntry.objects.filter(action="cluster.deleted").exists()


def test_an_unmapped_namespace_loses_its_queue_once_the_change_commits(
    client, alice, team, api, eager_tasks, django_capture_on_commit_callbacks
):
    cluster = make_cluster(team, api, kueue=True)
    map_namespace(cluster, actor=None, namespace="acme-infer", tenant=team.tenant)
    from clusters import sync

    sync.sync_cluster(cluster)
    queues = {k[1] for k in api.objects if k[0] == "localqueues"}
    assert queues == {NS, "acme-infer"}
    client.force_login(alice)
    url = f"/api/v1/clusters/{cluster.pk}/namespaces/acme-infer/"
    with django_capture_on_commit_callbacks(execute=True):
        assert client.delete(url).status_code == 204
    assert {k[1] for k in api.objects if k[0] == "localqueues"} == {NS}
    assert list(cluster.namespaces.values_list("namespace", flat=True)) == [NS]
    assert client.delete(url).status_code == 404  # gone already
    assert AuditEntry.objects.filter(action="cluster.namespace_unmapped").count() == 1


def test_a_namespace_whose_workload_holds_a_request_stays_mapped(client, alice, team, cluster):
    _holding(team, cluster)
    client.force_login(alice)
    answer = client.delete(f"/api/v1/clusters/{cluster.pk}/namespaces/{NS}/")
    assert answer.status_code == 409
    assert cluster.namespaces.filter(namespace=NS).exists()


def test_only_platform_admins_change_delete_or_unmap(client, bob, cluster):
    client.force_login(bob)
    detail = reverse("api:cluster-detail", args=[cluster.pk])
    assert _api(client, "patch", detail, {"name": "x"}).status_code == 403
    assert client.delete(detail).status_code == 403
    assert client.delete(f"/api/v1/clusters/{cluster.pk}/namespaces/{NS}/").status_code == 403
    for name in ("clusters:edit", "clusters:delete"):
        assert client.post(reverse(name, args=[cluster.pk])).status_code == 403
    mapping = cluster.namespaces.get()
    remove = reverse("clusters:namespace_remove", args=[cluster.pk, mapping.pk])
    assert client.post(remove).status_code == 403
    assert Cluster.objects.get().name == "prod" and cluster.namespaces.exists()


def test_the_pages_edit_delete_and_unmap(client, alice, team, cluster):
    client.force_login(alice)
    page = client.get(cluster.get_absolute_url()).content.decode()
    assert reverse("clusters:edit", args=[cluster.pk]) in page
    edit = reverse("clusters:edit", args=[cluster.pk])
    assert client.get(edit).status_code == 200
    form = {"name": "prod-b", "api_url": cluster.api_url, "ca_bundle": "", "enforcement": "hami",
            "token": ""}  # fmt: skip
    assert client.post(edit, form).status_code == 302
    cluster.refresh_from_db()
    assert cluster.name == "prod-b" and cluster.token == TOKEN and not cluster.kueue
    assert client.post(edit, {**form, "api_url": "nope"}).status_code == 400
    link = _holding(team, cluster)
    mapping = cluster.namespaces.get()
    remove = reverse("clusters:namespace_remove", args=[cluster.pk, mapping.pk])
    client.post(remove)
    assert cluster.namespaces.exists()  # held: explained, not removed
    client.post(reverse("clusters:delete", args=[cluster.pk]))
    assert Cluster.objects.exists()
    release_request(link.request_id, team.dev)
    assert client.post(remove).status_code == 302
    assert not cluster.namespaces.exists()
    assert client.post(reverse("clusters:delete", args=[cluster.pk])).status_code == 302
    assert not Cluster.objects.exists()


def test_a_running_gate_pass_holds_an_edit_off_then_it_is_a_503_and_nothing_changes(
    client, alice, cluster, monkeypatch
):
    """A pass lists the mappings, then admits: an unmap, a mode change or a delete between
    the two would leave a request no pass carries, so each waits for the pass's lock."""
    import psycopg
    from django.db import connection

    from clusters import gates, services

    monkeypatch.setattr(services, "PASS_WAIT_S", 0.3)
    settings = connection.settings_dict
    other = psycopg.connect(host=settings["HOST"] or "127.0.0.1",
                            port=settings["PORT"] or 5432, user=settings["USER"],
                            dbname=settings["NAME"], autocommit=True)  # fmt: skip
    client.force_login(alice)
    detail = reverse("api:cluster-detail", args=[cluster.pk])
    mapping = cluster.namespaces.get()
    audited = AuditEntry.objects.count()
    try:
        other.execute("SELECT pg_advisory_lock(%s, %s)", [gates._LOCK_CLASS, cluster.pk])
        answer = client.delete(f"/api/v1/clusters/{cluster.pk}/namespaces/{NS}/")
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "2"
        assert answer.json()["error"]["code"] == "cluster_unavailable"
        assert "gate pass" in answer.json()["error"]["message"]
        answer = _api(client, "patch", detail, {"kueue": True, "name": "other"})
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "2"
        assert client.delete(detail).status_code == 503
        remove = reverse("clusters:namespace_remove", args=[cluster.pk, mapping.pk])
        page = client.post(remove, follow=True).content.decode()
        assert "gate pass of this cluster is running" in page
    finally:
        other.close()
    assert cluster.namespaces.filter(namespace=NS).exists()
    cluster.refresh_from_db()
    assert cluster.name == "prod" and not cluster.kueue and Cluster.objects.exists()
    assert AuditEntry.objects.count() == audited
    # The pass over: the unmap goes through.
    assert client.delete(f"/api/v1/clusters/{cluster.pk}/namespaces/{NS}/").status_code == 204
