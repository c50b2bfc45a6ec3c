"""Kubernetes clusters (clusters/, docs/kubernetes.md): registering one, the quota objects
rendered for it (checked against Kueue's CRDs and Kubernetes' own schemas), and the sync
that writes them over HTTP to tests/kube_api.py with the official client."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from django.urls import reverse

from audit.interface import history_of
from clusters import sync
from clusters.choices import Enforcement
from clusters.models import Cluster, NamespaceMapping
from clusters.render import Target, render
from clusters.services import map_namespace, register_cluster
from portal.celery import app as celery_app
from quotas.interface import pool_quotas
from tests import anchors
from tests.factories import PoolFactory, QuotaFactory, TenantFactory
from tests.kube_api import self_signed, serving

pytestmark = pytest.mark.django_db
TOKEN = "sa-token-0123456789"
MiB_80G = 81920


@pytest.fixture
def world():
    pool = PoolFactory(name="Train", slug="train")
    acme, bravo = TenantFactory(name="Acme", slug="acme"), TenantFactory(name="Bravo", slug="bravo")
    QuotaFactory(tenant=acme, pool=pool)  # 4 guaranteed, 8 limit
    QuotaFactory(tenant=bravo, pool=pool, guaranteed_vgpus=1, limit_vgpus=2,
                 guaranteed_compute_pct=100, limit_compute_pct=200,
                 guaranteed_memory_mib=MiB_80G, limit_memory_mib=2 * MiB_80G)  # fmt: skip
    return pool, acme, bravo


def _cluster(pool, acme, bravo, url="http://127.0.0.1:1", **fields) -> Cluster:
    cluster = register_cluster(actor=None, token=TOKEN, name=fields.pop("name", "prod"),
                               api_url=url, pool=pool, **fields)  # fmt: skip
    map_namespace(cluster, actor=None, namespace="acme-train", tenant=acme)
    map_namespace(cluster, actor=None, namespace="acme-infer", tenant=acme)
    map_namespace(cluster, actor=None, namespace="bravo", tenant=bravo)
    return cluster


# --- a cluster is a place in the portal ------------------------------------------------------


def test_the_admin_registers_a_cluster_and_its_token_is_never_shown_again(client, alice, world):
    pool, *_ = world
    client.force_login(alice)
    answer = client.post(reverse("clusters:add"), {
        "name": "prod", "api_url": "https://k8s.example.com:6443", "token": TOKEN,
        "enforcement": Enforcement.DRA_HAMI, "kueue": "on", "pool": pool.pk})  # fmt: skip
    cluster = Cluster.objects.get()
    assert answer.status_code == 302 and answer.url == cluster.get_absolute_url()
    assert TOKEN not in cluster.token_encrypted and cluster.token == TOKEN
    page = client.get(cluster.get_absolute_url()).content.decode()
    assert TOKEN not in page and cluster.token_hint in page
    assert TOKEN not in client.get(reverse("clusters:add")).content.decode()
    listing = client.get(reverse("clusters:list")).content.decode()
    assert "prod" in listing and 'aria-current="page"' in listing  # its menu entry


@pytest.mark.parametrize(
    "change",
    [
        {"token": ""},
        {"api_url": "not a url"},
        {"enforcement": "mig"},
        {"pool": 0},
        {"ca_bundle": "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----"},
    ],
)
def test_a_bad_registration_is_a_400_and_changes_nothing(client, alice, world, change):
    pool, *_ = world
    client.force_login(alice)
    form = {"name": "prod", "api_url": "https://k8s.example.com", "token": TOKEN,
            "enforcement": Enforcement.HAMI, "pool": pool.pk, **change}  # fmt: skip
    assert client.post(reverse("clusters:add"), form).status_code == 400
    assert not Cluster.objects.exists()


def test_a_member_sees_no_cluster_page_and_registers_none(client, bob, world):
    pool, acme, bravo = world
    cluster = _cluster(pool, acme, bravo)
    client.force_login(bob)
    assert client.get(reverse("clusters:list")).status_code == 403
    assert client.get(cluster.get_absolute_url()).status_code == 403
    form = {"name": "x", "api_url": "https://x.example", "token": TOKEN, "enforcement": "hami",
            "pool": pool.pk}  # fmt: skip
    assert client.post(reverse("clusters:add"), form).status_code == 403
    assert client.get(reverse("api:cluster-list")).status_code == 403
    assert Cluster.objects.count() == 1


@pytest.mark.parametrize("namespace", ["Acme_Train", "-acme", "x" * 64, "acme-train"])
def test_a_bad_or_taken_namespace_is_a_400_and_maps_nothing(client, alice, world, namespace):
    pool, acme, bravo = world
    cluster = _cluster(pool, acme, bravo)
    client.force_login(alice)
    answer = client.post(cluster.get_absolute_url(), {"namespace": namespace, "tenant": bravo.pk})
    assert answer.status_code == 400
    assert NamespaceMapping.objects.filter(tenant=bravo).count() == 1


def test_the_admin_maps_a_namespace_on_the_page(client, alice, world):
    pool, acme, bravo = world
    cluster = _cluster(pool, acme, bravo)
    client.force_login(alice)
    answer = client.post(cluster.get_absolute_url(), {"namespace": "bravo-2", "tenant": bravo.pk})
    assert answer.status_code == 302
    assert cluster.namespaces.filter(namespace="bravo-2", tenant=bravo).exists()


def test_the_api_registers_a_cluster_and_never_returns_its_token(client, alice, world):
    pool, acme, _ = world
    client.force_login(alice)
    body = {"name": "prod", "api_url": "https://k8s.example.com", "token": TOKEN,
            "enforcement": "dra-nvidia", "kueue": False, "pool": pool.pk}  # fmt: skip
    answer = client.post(reverse("api:cluster-list"), body, content_type="application/json")
    assert answer.status_code == 201, answer.content
    assert "token" not in answer.json() and answer.json()["token_hint"]
    cluster = Cluster.objects.get()
    assert cluster.token == TOKEN and not cluster.kueue
    url = reverse("api:cluster-namespaces", args=[cluster.pk])
    mapped = client.post(url, {"namespace": "acme", "tenant": acme.pk},
                         content_type="application/json")  # fmt: skip
    assert mapped.status_code == 201
    listed = client.get(reverse("api:cluster-list")).content.decode()
    assert TOKEN not in listed and '"namespace":"acme"' in listed.replace(" ", "")


@pytest.mark.parametrize(
    "change",
    [{"enforcement": "mig"}, {"token": ""}, {"api_url": "ftp//x"}, {"pool": 999999}, {"name": ""}],
)
def test_a_bad_api_registration_is_a_400_and_changes_nothing(client, alice, world, change):
    pool, *_ = world
    client.force_login(alice)
    body = {"name": "prod", "api_url": "https://k8s.example.com", "token": TOKEN,
            "enforcement": "hami", "pool": pool.pk, **change}  # fmt: skip
    answer = client.post(reverse("api:cluster-list"), body, content_type="application/json")
    assert answer.status_code == 400
    assert not Cluster.objects.exists()


def test_a_bad_namespace_through_the_api_is_a_400(client, alice, world):
    pool, acme, bravo = world
    cluster = _cluster(pool, acme, bravo)
    client.force_login(alice)
    url = reverse("api:cluster-namespaces", args=[cluster.pk])
    for body in ({"namespace": "acme-train", "tenant": bravo.pk},
                 {"namespace": "UPPER", "tenant": bravo.pk}):  # fmt: skip
        assert client.post(url, body, content_type="application/json").status_code == 400
    assert cluster.namespaces.count() == 3


# --- quotas where pods run: the rendered objects ----------------------------------------------


def _crd_schema(plural: str):
    crd = yaml.safe_load(anchors.kueue_crd(plural).read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    return version["schema"]["openAPIV3Schema"]


KINDS = {"ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
         "ResourceFlavor": "resourceflavors"}  # fmt: skip


def check(obj: dict) -> None:
    """Kueue's objects against its v0.19.2 CRD, core ones against Kubernetes 1.37's schema."""
    if obj["apiVersion"].startswith("kueue.x-k8s.io/"):
        assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
        jsonschema.validate(obj, _crd_schema(KINDS[obj["kind"]]))
    else:
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


MODES = [(e, k) for e in Enforcement for k in (True, False)]


@pytest.mark.parametrize(("enforcement", "kueue"), MODES)
def test_every_rendered_object_passes_its_official_schema(world, enforcement, kueue):
    pool, acme, bravo = world
    cluster = _cluster(pool, acme, bravo, enforcement=enforcement, kueue=kueue)
    objects = sync.desired_objects(cluster)
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == (["ClusterQueue", "LocalQueue", "ResourceFlavor"] if kueue
                     else ["ResourceQuota"])  # fmt: skip
    for obj in objects:
        check(obj)


def test_the_checks_catch_a_broken_object(world):
    pool, acme, bravo = world
    queue = next(o for o in sync.desired_objects(_cluster(pool, acme, bravo))
                 if o["kind"] == "ClusterQueue")  # fmt: skip
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0].pop("nominalQuota")
    with pytest.raises(jsonschema.ValidationError):
        check(queue)
    quota = render(Target(Enforcement.HAMI, False, "train", {acme.pk: ["a"]}),
                   pool_quotas(pool.pk))[0]  # fmt: skip
    quota["spec"]["hard"] = "8"
    with pytest.raises(kubernetes_validate.ValidationError):
        check(quota)


def test_a_cluster_queue_is_the_tenants_guarantee_and_borrows_up_to_its_limit(world):
    pool, acme, bravo = world
    objects = sync.desired_objects(_cluster(pool, acme, bravo))
    queues = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterQueue"}
    assert set(queues) == {"gp-train-acme", "gp-train-bravo"}
    spec = queues["gp-train-bravo"]["spec"]
    assert spec["cohortName"] == "gp-train"
    assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == ["bravo"]
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/gpumem",
                                         "nvidia.com/gpucores"]  # fmt: skip
    assert group["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": 1, "borrowingLimit": 1},
        {"name": "nvidia.com/gpumem", "nominalQuota": MiB_80G, "borrowingLimit": MiB_80G},
        {"name": "nvidia.com/gpucores", "nominalQuota": 100, "borrowingLimit": 100},
    ]
    local = sorted((o["metadata"]["namespace"], o["spec"]["clusterQueue"])
                   for o in objects if o["kind"] == "LocalQueue")  # fmt: skip
    assert local == [("acme-infer", "gp-train-acme"), ("acme-train", "gp-train-acme"),
                     ("bravo", "gp-train-bravo")]  # fmt: skip


def test_dra_counts_devices_of_the_drivers_class(world):
    pool, acme, bravo = world
    with_kueue = sync.desired_objects(_cluster(pool, acme, bravo, enforcement="dra-nvidia"))
    queue = next(o for o in with_kueue if o["metadata"]["name"] == "gp-train-acme")
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "gpu.nvidia.com", "nominalQuota": 4, "borrowingLimit": 4}
    ]
    plain = sync.desired_objects(
        _cluster(pool, acme, bravo, name="edge", enforcement="dra-hami", kueue=False)
    )
    bravo_quota = next(o for o in plain if o["metadata"]["namespace"] == "bravo")
    assert bravo_quota["spec"]["hard"] == {
        "hami-core-gpu.project-hami.io.deviceclass.resource.k8s.io/devices": "2"
    }


def test_without_kueue_each_namespace_gets_a_resource_quota_of_the_tenants_limit(world):
    pool, acme, bravo = world
    objects = sync.desired_objects(_cluster(pool, acme, bravo, kueue=False))
    assert sorted(o["metadata"]["namespace"] for o in objects) == [
        "acme-infer", "acme-train", "bravo"]  # fmt: skip
    acme_quota = next(o for o in objects if o["metadata"]["namespace"] == "acme-train")
    assert acme_quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "8",
        "requests.nvidia.com/gpumem": str(8 * MiB_80G),
        "requests.nvidia.com/gpucores": "800",
    }


# --- sync: writing them to the cluster --------------------------------------------------------


def _nominal(api, queue: str, resource: int = 0):
    return api.get("clusterqueues", queue)["spec"]["resourceGroups"][0]["flavors"][0][
        "resources"][resource]  # fmt: skip


def test_the_first_sync_creates_the_objects_and_the_next_finds_them_in_step(world):
    pool, acme, bravo = world
    with serving(TOKEN) as api:
        cluster = _cluster(pool, acme, bravo, url=api.url)
        first = sync.sync_cluster(cluster)
        assert {a.outcome for a in first} == {"created"} and len(first) == 6
        assert api.get("resourceflavors", "gp-train") is not None
        assert api.get("localqueues", "gp-train-acme", namespace="acme-infer")
        assert _nominal(api, "gp-train-acme")["nominalQuota"] == 4
        before = len(api.requests)
        second = sync.sync_cluster(cluster)
        assert {a.outcome for a in second} == {"unchanged"}
        assert {r[0] for r in api.requests[before:]} == {"GET"}  # nothing written
    cluster.refresh_from_db()
    assert cluster.synced_at and not cluster.sync_error


@pytest.fixture
def eager():
    """Tasks run in the test's process (Celery's own eager mode), then as before."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def test_a_quota_change_shows_in_the_cluster_queue(
    world, eager, django_capture_on_commit_callbacks
):
    pool, acme, bravo = world
    with serving(TOKEN) as api:
        cluster = _cluster(pool, acme, bravo, url=api.url)
        sync.sync_cluster(cluster)
        quota = acme.quotas.get(pool=pool)
        quota.guaranteed_vgpus, quota.limit_vgpus = 6, 10
        with django_capture_on_commit_callbacks(execute=True):
            quota.save()  # the receiver runs the task once the change commits
        assert _nominal(api, "gp-train-acme") == {
            "name": "nvidia.com/gpu", "nominalQuota": 6, "borrowingLimit": 4}  # fmt: skip
        with django_capture_on_commit_callbacks(execute=True):  # a namespace mapped: at once
            map_namespace(cluster, actor=None, namespace="bravo-2", tenant=bravo)
        assert api.get("localqueues", "gp-train-bravo", namespace="bravo-2") is not None
    cluster.refresh_from_db()
    outcomes = {(a["name"], a["namespace"], a["outcome"]) for a in cluster.sync_report}
    assert ("gp-train-bravo", "", "updated") in outcomes  # its namespaceSelector
    assert ("gp-train-acme", "", "unchanged") in outcomes


def test_a_conflict_on_update_is_read_again_and_retried(world):
    pool, acme, bravo = world
    with serving(TOKEN) as api:
        cluster = _cluster(pool, acme, bravo, url=api.url)
        sync.sync_cluster(cluster)
        acme.quotas.filter(pool=pool).update(limit_vgpus=12)
        writes = []

        def another_writer(stored):  # the first PUT finds it changed under it: 409
            writes.append(stored["metadata"]["name"])
            if len(writes) > 1:
                return False
            stored["metadata"].setdefault("labels", {})["someone"] = "else"
            return True

        api.before_put = another_writer
        sync.sync_cluster(cluster)
        puts = [r for r in api.requests if r[0] == "PUT"]
        assert len(puts) == 2 and puts[0] == puts[1]
        assert _nominal(api, "gp-train-acme")["borrowingLimit"] == 8
        # The other writer's label survives: the retry started from what it wrote.
        assert api.get("clusterqueues", "gp-train-acme")["metadata"]["labels"]["someone"] == "else"
    cluster.refresh_from_db()
    assert not cluster.sync_error


def test_drift_in_the_cluster_is_shown_and_repaired(client, alice, world):
    pool, acme, bravo = world
    with serving(TOKEN) as api:
        cluster = _cluster(pool, acme, bravo, url=api.url)
        sync.sync_cluster(cluster)

        def raise_it(obj):  # kubectl edit clusterqueue gp-train-bravo
            obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 50

        api.edit("clusterqueues", "gp-train-bravo", raise_it)
        applied = {a.name: a for a in sync.sync_cluster(cluster)
                   if a.kind == "ClusterQueue"}  # fmt: skip
        assert applied["gp-train-bravo"].outcome == "repaired"
        assert applied["gp-train-bravo"].drift == [
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"]  # fmt: skip
        assert applied["gp-train-acme"].outcome == "unchanged"
        assert _nominal(api, "gp-train-bravo")["nominalQuota"] == 1
    (logged,) = history_of(cluster).filter(action="cluster.drift_repaired")
    assert logged.actor is None and logged.message == "ClusterQueue gp-train-bravo"
    client.force_login(alice)
    page = client.get(cluster.get_absolute_url()).content.decode()
    assert 'data-object="ClusterQueue/gp-train-bravo" data-outcome="repaired"' in page
    assert "resources[0].nominalQuota" in page


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cluster_that_does_not_answer_shows_an_error_and_stops_nothing_else(
    client, alice, world, settings
):
    pool, acme, bravo = world
    settings.CLUSTER_TIMEOUT_S = 2
    with serving(TOKEN) as api:
        away = _cluster(pool, acme, bravo, name="away", url=f"http://127.0.0.1:{_closed_port()}")
        fine = _cluster(pool, acme, bravo, name="fine", url=api.url)
        results = sync.sync_all()
        assert results["fine"] == "ok" and results["away"] != "ok"
        assert api.get("clusterqueues", "gp-train-acme") is not None
    away.refresh_from_db()
    fine.refresh_from_db()
    assert "Connection refused" in away.sync_error or "NewConnectionError" in away.sync_error
    assert not fine.sync_error and len(fine.sync_report) == 6
    client.force_login(alice)
    page = client.get(away.get_absolute_url()).content.decode()
    assert "cluster-sync-error" in page


def test_a_wrong_token_is_reported_as_the_clusters_answer(world):
    pool, acme, bravo = world
    with serving("another-token-entirely") as api:
        cluster = _cluster(pool, acme, bravo, url=api.url)
        sync.sync_cluster(cluster)
        assert not api.objects
    cluster.refresh_from_db()
    assert cluster.sync_error.startswith("HTTP 401")


def test_what_the_portal_no_longer_wants_is_deleted_and_nothing_else(world):
    pool, acme, bravo = world
    with serving(TOKEN) as api:
        cluster = _cluster(pool, acme, bravo, url=api.url)
        sync.sync_cluster(cluster)
        api.objects[("clusterqueues", "", "theirs")] = {  # the cluster's own, not the portal's
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": "theirs", "resourceVersion": "1", "labels": {"team": "x"}},
            "spec": {}}  # fmt: skip
        bravo.quotas.get(pool=pool).delete()
        cluster.namespaces.filter(namespace="acme-infer").delete()
        deleted = {(a.kind, a.namespace, a.name) for a in sync.sync_cluster(cluster)
                   if a.outcome == "deleted"}  # fmt: skip
        assert deleted == {("ClusterQueue", "", "gp-train-bravo"),
                           ("LocalQueue", "bravo", "gp-train-bravo"),
                           ("LocalQueue", "acme-infer", "gp-train-acme")}  # fmt: skip
        assert api.get("clusterqueues", "theirs") is not None
        selector = api.get("clusterqueues", "gp-train-acme")["spec"]["namespaceSelector"]
        assert selector["matchExpressions"][0]["values"] == ["acme-train"]
        # Without Kueue now: the queues go, a ResourceQuota takes their place.
        Cluster.objects.filter(pk=cluster.pk).update(kueue=False)
        cluster.refresh_from_db()
        outcomes = {(a.kind, a.outcome) for a in sync.sync_cluster(cluster)}
        assert outcomes == {("ResourceQuota", "created"), ("ClusterQueue", "deleted"),
                            ("LocalQueue", "deleted"), ("ResourceFlavor", "deleted")}  # fmt: skip
        assert sorted(k[0] for k in api.objects) == ["clusterqueues", "resourcequotas"]


def test_the_ca_bundle_is_what_the_client_trusts(world, tmp_path, settings):
    pool, acme, bravo = world
    settings.CLUSTER_TIMEOUT_S = 5
    pem, cert, key = self_signed(tmp_path)
    ca_files = set(Path(tempfile.gettempdir()).glob("gp-cluster-ca-*"))
    with serving(TOKEN, tls=(cert, key)) as api:
        trusted = _cluster(pool, acme, bravo, name="trusted", url=api.url, ca_bundle=pem)
        unknown = _cluster(pool, acme, bravo, name="unknown", url=api.url)
        sync.sync_cluster(unknown)  # the system's authorities do not know this certificate
        unknown.refresh_from_db()
        assert "CERTIFICATE_VERIFY_FAILED" in unknown.sync_error and not api.objects
        sync.sync_cluster(trusted)
        trusted.refresh_from_db()
        assert not trusted.sync_error and api.get("clusterqueues", "gp-train-acme")
    # The bundle's file, written for the client, is gone again.
    assert set(Path(tempfile.gettempdir()).glob("gp-cluster-ca-*")) == ca_files


def test_an_object_created_between_the_read_and_the_create_is_compared_not_failed(world):
    pool, acme, bravo = world
    with serving(TOKEN) as api:
        cluster = _cluster(pool, acme, bravo, url=api.url, kueue=False)
        wanted = sync.desired_objects(cluster)[0]
        real_handle = api.handle

        def racing(method, path, auth, body):  # another writer creates it just before us
            if method == "POST":
                api.handle = real_handle
                theirs = {**body, "metadata": {"name": body["metadata"]["name"]},
                          "spec": {"hard": {}}}  # fmt: skip
                real_handle(method, path, auth, theirs)
            return real_handle(method, path, auth, body)

        api.handle = racing
        with sync.api_client(cluster) as client:
            applied = sync.apply(sync.Kube(client), wanted)
        assert applied.outcome == "updated"
        stored = api.get("resourcequotas", wanted["metadata"]["name"], namespace="acme-infer")
        assert stored["spec"] == wanted["spec"]
