"""Applying the portal's quota objects to a cluster with the official ``kubernetes`` client.

Each object is read; missing, it is created; different from what the portal wants, it is
replaced with the resourceVersion just read (a 409 Conflict, someone wrote in between, reads
again and retries). The annotation ``gpu-portal.io/spec-hash`` says what the portal last
wrote: an object that differs although its hash matches what the portal wants now was
edited in the cluster, and that is drift, reported and repaired. The portal's objects for
the pool (by label) that it no longer wants are deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field

from django.conf import settings
from django.utils import timezone
from kubernetes import client as k8s

from audit.interface import record
from clusters import inventory
from clusters.choices import SyncOutcome
from clusters.models import Cluster
from clusters.render import Target, owned_by, render
from quotas.interface import pool_quotas

logger = logging.getLogger(__name__)

SPEC_HASH = "gpu-portal.io/spec-hash"
CONFLICT_RETRIES = 3
PLURALS = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
           "LocalQueue": "localqueues", "ResourceQuota": "resourcequotas"}  # fmt: skip


@dataclass
class Applied:
    kind: str
    name: str
    namespace: str
    outcome: str
    drift: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "namespace": self.namespace,
                "outcome": self.outcome, "drift": self.drift}  # fmt: skip


def target_of(cluster: Cluster) -> Target:
    namespaces: dict[int, list[str]] = {}
    for mapping in cluster.namespaces.all():
        namespaces.setdefault(mapping.tenant_id, []).append(mapping.namespace)
    return Target(cluster.enforcement, cluster.kueue, cluster.pool.slug, namespaces)


def desired_objects(cluster: Cluster) -> list[dict]:
    return render(target_of(cluster), pool_quotas(cluster.pool_id))


def spec_hash(obj: dict) -> str:
    canonical = json.dumps({"spec": obj.get("spec"), "labels": obj["metadata"].get("labels")},
                           sort_keys=True, default=str)  # fmt: skip
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def differences(want, have, path: str = "") -> list[str]:
    """Where ``have`` (the cluster's) departs from ``want`` (the portal's). Only what the
    portal sets is compared: the server's defaults (Kueue's preemption, stopPolicy) are not
    drift. Numbers compare as text, as the API server keeps quantities."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [path or "."]
        found = []
        for key, value in want.items():
            found += differences(value, have.get(key), f"{path}.{key}" if path else key)
        return found
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return [path]
        found = []
        for i, (w, h) in enumerate(zip(want, have, strict=True)):
            found += differences(w, h, f"{path}[{i}]")
        return found
    return [] if have is not None and str(want) == str(have) else [path]


def api_client(cluster: Cluster) -> k8s.ApiClient:
    config = k8s.Configuration(host=cluster.api_url.rstrip("/"))
    config.api_key = {"BearerToken": cluster.token}
    config.api_key_prefix = {"BearerToken": "Bearer"}
    config.retries = False  # one try: a cluster away is reported, not waited on
    if cluster.ca_bundle:
        # The client reads the CA from a file; it is only a public certificate.
        handle, path = tempfile.mkstemp(prefix="gp-cluster-ca-", suffix=".pem")
        with os.fdopen(handle, "w") as out:
            out.write(cluster.ca_bundle)
        config.ssl_ca_cert = path
    return k8s.ApiClient(config)


def _path(obj: dict, named: bool) -> str:
    kind, meta = obj["kind"], obj["metadata"]
    root = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
    namespace = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    name = f"/{meta['name']}" if named else ""
    return f"{root}{namespace}/{PLURALS[kind]}{name}"


class Kube:
    """The few REST calls the sync makes, raw JSON in and out."""

    def __init__(self, api: k8s.ApiClient):
        self.api = api

    def call(
        self, method: str, path: str, body: dict | list | None = None, *,
        content_type: str = "application/json",
    ) -> dict:  # fmt: skip
        response = self.api.call_api(
            path, method, header_params={"Content-Type": content_type,
                                         "Accept": "application/json"},
            body=body, auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=settings.CLUSTER_TIMEOUT_S, _return_http_data_only=True,
        )  # fmt: skip
        return json.loads(response.data or b"{}")

    def owned(self, api_version: str, plural: str, selector: str) -> list[dict]:
        """Every object of the collection, in all namespaces, the selector picks; none where
        the cluster does not serve the collection (no Kueue installed: 404)."""
        root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            answer = self.api.call_api(
                f"{root}/{plural}", "GET", query_params=[("labelSelector", selector)],
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"],
                _preload_content=False, _request_timeout=settings.CLUSTER_TIMEOUT_S,
                _return_http_data_only=True,
            )  # fmt: skip
        except k8s.ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return json.loads(answer.data).get("items", [])

    def read(self, obj: dict) -> dict | None:
        return self.get(_path(obj, named=True))

    def get(self, path: str) -> dict | None:
        """The object at ``path``, or None where there is none (404)."""
        try:
            return self.call("GET", path)
        except k8s.ApiException as exc:
            if exc.status == 404:
                return None
            raise


def _with_hash(obj: dict, base_metadata: dict | None = None) -> dict:
    metadata = dict(base_metadata or {})
    metadata.update({k: v for k, v in obj["metadata"].items() if k != "labels"})
    metadata["labels"] = {**(metadata.get("labels") or {}), **obj["metadata"].get("labels", {})}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), SPEC_HASH: spec_hash(obj)}
    return {**obj, "metadata": metadata}


def apply(kube: Kube, obj: dict) -> Applied:
    meta = obj["metadata"]
    result = Applied(obj["kind"], meta["name"], meta.get("namespace", ""), SyncOutcome.UNCHANGED)
    for _ in range(CONFLICT_RETRIES):
        live = kube.read(obj)
        if live is None:
            try:
                kube.call("POST", _path(obj, named=False), _with_hash(obj))
            except k8s.ApiException as exc:
                if exc.status != 409:
                    raise
                continue  # created by someone in between: read it and compare
            result.outcome = SyncOutcome.CREATED
            return result
        drift = differences(obj.get("spec", {}), live.get("spec", {}), "spec")
        drift += differences(meta.get("labels", {}), live["metadata"].get("labels", {}),
                             "metadata.labels")  # fmt: skip
        if not drift:
            return result
        written = (live["metadata"].get("annotations") or {}).get(SPEC_HASH)
        if written == spec_hash(obj):
            result.outcome, result.drift = SyncOutcome.REPAIRED, drift
        else:
            result.outcome = SyncOutcome.UPDATED
        body = _with_hash(obj, live["metadata"])  # carries the resourceVersion just read
        try:
            kube.call("PUT", _path(obj, named=True), body)
            return result
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
            logger.info("409 on %s %s: reading it again", obj["kind"], meta["name"])
    raise SyncError(f"{obj['kind']} {meta['name']}: still in conflict after "
                    f"{CONFLICT_RETRIES} tries")  # fmt: skip


class SyncError(Exception):
    pass


# What the portal may have written in some mode, so a change of mode or a quota or namespace
# gone leaves nothing behind.
WRITTEN = [("kueue.x-k8s.io/v1beta2", "ClusterQueue"), ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
           ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"), ("v1", "ResourceQuota")]  # fmt: skip


def prune(kube: Kube, wanted: list[dict], pool_slug: str) -> list[Applied]:
    """Delete the portal's objects for the pool that it no longer wants; the cluster's
    other objects (no portal label) are never touched."""
    keep = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in wanted}
    removed = []
    for api_version, kind in WRITTEN:
        for live in kube.owned(api_version, PLURALS[kind], owned_by(pool_slug)):
            meta = live["metadata"]
            key = (kind, meta.get("namespace", ""), meta["name"])
            if key in keep:
                continue
            obj = {"apiVersion": api_version, "kind": kind, "metadata": meta}
            try:
                kube.call("DELETE", _path(obj, named=True))
            except k8s.ApiException as exc:
                if exc.status != 404:  # gone already: what was wanted
                    raise
            removed.append(Applied(kind, meta["name"], meta.get("namespace", ""),
                                   SyncOutcome.DELETED))  # fmt: skip
    return removed


def error_text(exc: BaseException) -> str:
    # The client wraps a TLS or connection failure in an ApiException with status 0 and
    # then fails decoding its empty body: the ApiException underneath says what happened.
    found: BaseException | None = exc
    while found is not None and not isinstance(found, k8s.ApiException):
        found = found.__context__
    if found is None:
        return f"{type(exc).__name__}: {exc}"[:500]
    reason = " ".join(str(found.reason or "").split())
    if not found.status:
        return reason[:500]
    body = found.body.decode() if isinstance(found.body, bytes) else str(found.body or "")
    return f"HTTP {found.status} {reason}: {body[:300]}".strip()


def sync_cluster(cluster: Cluster) -> list[Applied]:
    """Write the cluster's objects; the outcome (or the error) is kept on the cluster. Never
    raises for the cluster's sake: one cluster away must not stop the others."""
    applied: list[Applied] = []
    error = ""
    api = api_client(cluster)
    try:
        try:
            kube = Kube(api)
            wanted = desired_objects(cluster)
            for obj in wanted:
                applied.append(apply(kube, obj))
            applied += prune(kube, wanted, cluster.pool.slug)
        except Exception as exc:
            logger.warning("cluster %s: sync failed: %s", cluster.name, exc)
            error = error_text(exc)
        # Its nodes and cards, whatever became of the quotas (clusters.inventory).
        inventory.sync_inventory(cluster, api, error_text)
    finally:
        api.close()
        if cluster.ca_bundle:
            os.unlink(api.configuration.ssl_ca_cert)
    for repaired in (a for a in applied if a.outcome == SyncOutcome.REPAIRED):
        # Someone changed the portal's quota in the cluster: the log says what, and when.
        where = f"{repaired.namespace}/{repaired.name}" if repaired.namespace else repaired.name
        record("cluster.drift_repaired", cluster, after=repaired.as_dict(),
               message=f"{repaired.kind} {where}")  # fmt: skip
    Cluster.objects.filter(pk=cluster.pk).update(
        synced_at=timezone.now(), sync_error=error,
        sync_report=[a.as_dict() for a in applied],
    )  # fmt: skip
    return applied


def sync_all() -> dict[str, str]:
    """Every cluster, each on its own: ``{name: "ok" | error}``."""
    results = {}
    for cluster in Cluster.objects.select_related("pool"):
        sync_cluster(cluster)
        cluster.refresh_from_db(fields=["sync_error"])
        results[cluster.name] = cluster.sync_error or "ok"
    return results
