"""Gated Pods become GPU requests: the controller pass (docs/kubernetes.md, "Gated workloads").

Each pass lists the Pods of every mapped namespace. A Pod carrying the portal's gate (the
scheduling gate ``gpu-portal.io/approval``, or under Kueue the annotation
``kueue.x-k8s.io/admission-gated-by`` naming ``gpu-portal/approval``) and not seen before
(by uid) gets a GPU request for the namespace's tenant in the cluster's pool, made by
``quotas.interface.create_request`` as any request is, so policy, quota and approval apply.
Then, each pass, the request's state is carried to the Pod: allocated, the gate is removed;
rejected, cancelled or expired, an Event says why (the gate stays); released, the Pod is
deleted. Every pass lists everything again, so a list that failed is simply the next one.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from kubernetes import client as k8s

from audit.interface import record
from clusters.models import Cluster, ClusterWorkload, NamespaceMapping, WorkloadState
from clusters.render import HAMI_CORES, HAMI_GPU, HAMI_MEMORY
from clusters.sync import CONFLICT_RETRIES, Kube, api_client, error_text
from quotas.choices import RequestState, Role
from quotas.interface import create_request, end_request
from quotas.models import GpuRequest, Membership

logger = logging.getLogger(__name__)

GATE = "gpu-portal.io/approval"
KUEUE_GATED_BY = "kueue.x-k8s.io/admission-gated-by"
KUEUE_GATE = "gpu-portal/approval"
DURATION = "gpu-portal.io/duration-hours"
REASON = "gpu-portal.io/reason"
COMPONENT = "gpu-portal"
MAX_VGPUS, MAX_MEMORY_MIB, MAX_HOURS = 64, 16 * 1024 * 1024, 24 * 366
ENDED_BADLY = {RequestState.REJECTED, RequestState.CANCELLED, RequestState.EXPIRED}


class Refused(Exception):
    """A Pod the portal asks nothing for: the message says why, to the log and the Pod."""


def _annotations(pod: dict) -> dict:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations if isinstance(annotations, dict) else {}


def _gates(pod: dict) -> list:
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return gates if isinstance(gates, list) else []


def _kueue_gaters(pod: dict) -> list[str]:
    value = _annotations(pod).get(KUEUE_GATED_BY)
    if not isinstance(value, str):
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def is_gated(pod: dict, kueue: bool) -> bool:
    """Whether the Pod waits for the portal: Kueue's annotation under Kueue (kueue#9482),
    the Pod scheduling gate without it."""
    if kueue:
        return KUEUE_GATE in _kueue_gaters(pod)
    return any(isinstance(g, dict) and g.get("name") == GATE for g in _gates(pod))


_INTEGER = re.compile(r"^[0-9]{1,9}$")


def _whole(value, what: str, low: int, high: int) -> int:
    """A plain integer quantity within bounds: HAMi's resources are counts, MiB and %, never
    '1Gi' or '0.5'; anything else is refused rather than guessed."""
    text = (
        str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else ""
    )
    if not _INTEGER.match(text) or not low <= int(text) <= high:
        raise Refused(
            _("%(what)s must be a whole number from %(low)s to %(high)s, not %(value)s.")
            % {"what": what, "low": low, "high": high, "value": repr(value)[:40]}
        )
    return int(text)


@dataclass(frozen=True)
class Size:
    count: int
    compute_pct: int
    memory_mib: int
    whole_card: bool


def size_of(pod: dict) -> Size:
    """The request a Pod asks for, from its containers' HAMi limits (requests where a limit is
    missing): vGPUs summed, memory (MiB) and cores (%) per vGPU the largest any container asks;
    no ``nvidia.com/gpumem`` and ``gpucores`` is a whole card."""
    containers = (pod.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        raise Refused(_("The Pod has no containers."))
    count, memory, cores = 0, 0, 0
    for container in containers:
        resources = container.get("resources") if isinstance(container, dict) else None
        resources = resources if isinstance(resources, dict) else {}
        limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
        asks = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
        merged = {**asks, **limits}
        if HAMI_GPU not in merged:
            continue
        count += _whole(merged[HAMI_GPU], HAMI_GPU, 1, MAX_VGPUS)
        if HAMI_MEMORY in merged:
            memory = max(memory, _whole(merged[HAMI_MEMORY], HAMI_MEMORY, 1, MAX_MEMORY_MIB))
        if HAMI_CORES in merged:
            cores = max(cores, _whole(merged[HAMI_CORES], HAMI_CORES, 1, 100))
    if not count:
        raise Refused(_("No container asks for %(gpu)s.") % {"gpu": HAMI_GPU})
    if count > MAX_VGPUS:
        raise Refused(
            _("%(count)s vGPUs asked: at most %(max)s.") % {"count": count, "max": MAX_VGPUS}
        )
    if cores and not memory:
        # HAMi gives such a container the whole card's memory: the ask cannot be sized.
        raise Refused(
            _("Give %(memory)s with %(cores)s: without it HAMi gives the whole card's memory.")
            % {"memory": HAMI_MEMORY, "cores": HAMI_CORES}
        )
    whole = not memory and not cores
    return Size(count, cores or 100, memory or 1024, whole)


def _requester(mapping: NamespaceMapping):
    """The namespace's own portal user, a member of its tenant: the requester of its Pods'
    requests (a Pod says nothing trustworthy about who made it). Made on first use."""
    users = get_user_model()
    username = f"k8s-{mapping.cluster_id}-{mapping.namespace}"[:150]
    user, made = users.objects.get_or_create(**{users.USERNAME_FIELD: username})
    if made:
        user.set_unusable_password()
        user.save()
    _membership, joined = Membership.objects.get_or_create(
        user=user, tenant_id=mapping.tenant_id, defaults={"role": Role.MEMBER}
    )
    if joined:  # a member no person added: the log says why it is there
        record("cluster.requester_made", mapping.cluster, tenant_id=mapping.tenant_id,
               after={"username": username, "namespace": mapping.namespace})  # fmt: skip
    return user


def _ask(pod: dict, size: Size) -> dict:
    annotations = _annotations(pod)
    hours = None
    if DURATION in annotations:
        hours = _whole(annotations[DURATION], DURATION, 1, MAX_HOURS)
    meta = pod["metadata"]
    reason = annotations.get(REASON)
    if not isinstance(reason, str) or not reason.strip():
        reason = _("Kubernetes Pod %(namespace)s/%(name)s") % {
            "namespace": meta["namespace"], "name": meta["name"]}  # fmt: skip
    return {"count": size.count, "whole_card": size.whole_card, "compute_pct": size.compute_pct,
            "memory_mib": size.memory_mib, "duration_hours": hours,
            "reason": reason[:2000]}  # fmt: skip


def _identity(pod: dict) -> tuple[str, str, str]:
    meta = pod.get("metadata")
    if not isinstance(meta, dict):
        raise Refused(_("The Pod has no metadata."))
    name, namespace, uid = meta.get("name"), meta.get("namespace"), meta.get("uid")
    if not all(isinstance(v, str) and 0 < len(v) <= 253 for v in (name, namespace, uid)):
        raise Refused(_("The Pod has no name, namespace or uid."))
    return name, namespace, uid[:64]


def _messages(exc: ValidationError) -> str:
    if hasattr(exc, "message_dict"):
        return " ".join(m for ms in exc.message_dict.values() for m in ms)
    return " ".join(exc.messages)


def admit_new(cluster: Cluster, mapping: NamespaceMapping, pod: dict) -> ClusterWorkload | None:
    """Link a gated Pod seen for the first time to a new request (or to the reason it got
    none); the Pod already linked is left to ``carry``. None for a Pod without identity."""
    try:
        name, namespace, uid = _identity(pod)
    except Refused as exc:
        logger.warning("cluster %s: a Pod refused: %s", cluster.name, exc)
        return None
    found = ClusterWorkload.objects.filter(cluster=cluster, uid=uid).first()
    if found is not None:
        return found
    with transaction.atomic():
        link = ClusterWorkload(cluster=cluster, namespace=namespace, name=name, uid=uid)
        try:
            size = size_of(pod)
            link.request = create_request(_requester(mapping), tenant=mapping.tenant,
                                          pool=cluster.pool, **_ask(pod, size))  # fmt: skip
        except (Refused, ValidationError) as exc:
            text = _messages(exc) if isinstance(exc, ValidationError) else str(exc)
            logger.warning("cluster %s: Pod %s/%s refused: %s", cluster.name, namespace, name,
                           text)  # fmt: skip
            link.state, link.error = WorkloadState.REFUSED, text[:2000]
        link.save()
    return link


class Pods:
    """The Pod calls of the pass, raw JSON through the official client."""

    def __init__(self, kube: Kube):
        self.kube = kube

    def list(self, namespace: str) -> list[dict]:
        return self.kube.call("GET", f"/api/v1/namespaces/{namespace}/pods").get("items", [])

    def read(self, namespace: str, name: str) -> dict | None:
        return self.kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def patch(self, namespace: str, name: str, ops: list[dict]) -> dict:
        return self.kube.call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", ops,
                              content_type="application/json-patch+json")  # fmt: skip

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.kube.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        except k8s.ApiException as exc:
            if exc.status != 404:  # gone already: what was wanted
                raise

    def event(self, pod: dict, reason: str, message: str, kind: str = "Warning") -> dict:
        meta = pod["metadata"]
        now = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name'][:200]}.{uuid.uuid4().hex[:16]}",
                         "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        return self.kube.call("POST", f"/api/v1/namespaces/{meta['namespace']}/events", event)


def _removal(pod: dict, kueue: bool) -> list[dict] | None:
    """The JSON patch taking exactly the portal's gate off, None when it is gone already.
    The resourceVersion read makes it conditional (409 when the Pod changed), and a test of
    the entry keeps it from removing another's gate at the same index."""
    version = [{"op": "test", "path": "/metadata/resourceVersion",
                "value": pod["metadata"]["resourceVersion"]}]  # fmt: skip
    if kueue:
        gaters = _kueue_gaters(pod)
        if KUEUE_GATE not in gaters:
            return None
        path = "/metadata/annotations/" + KUEUE_GATED_BY.replace("~", "~0").replace("/", "~1")
        rest = [g for g in gaters if g != KUEUE_GATE]
        if rest:
            return [*version, {"op": "replace", "path": path, "value": ",".join(rest)}]
        return [*version, {"op": "remove", "path": path}]
    for i, gate in enumerate(_gates(pod)):
        if isinstance(gate, dict) and gate.get("name") == GATE:
            return [*version, {"op": "test", "path": f"/spec/schedulingGates/{i}", "value": gate},
                    {"op": "remove", "path": f"/spec/schedulingGates/{i}"}]  # fmt: skip
    return None


def remove_gate(pods: Pods, pod: dict, kueue: bool) -> bool:
    """Take the gate off; True once it is off (by us or anyone). A 409 or a failed test (the
    Pod changed between the read and the patch) reads it again and retries."""
    meta = pod["metadata"]
    for _try in range(CONFLICT_RETRIES):
        ops = _removal(pod, kueue)
        if ops is None:
            return True
        try:
            pods.patch(meta["namespace"], meta["name"], ops)
            return True
        except k8s.ApiException as exc:
            if exc.status not in (409, 422):
                raise
            logger.info("%s on Pod %s/%s: reading it again", exc.status, meta["namespace"],
                        meta["name"])  # fmt: skip
        pod = pods.read(meta["namespace"], meta["name"])
        if pod is None:
            return True  # deleted meanwhile: nothing left to gate
    return False


def _why(req: GpuRequest, gated: bool) -> tuple[str, str]:
    """The Event's reason and message for a request that ended without GPUs."""
    words = {
        RequestState.REJECTED: ("GpuRequestRejected", _("GPU request #%(id)s was rejected.")),
        RequestState.CANCELLED: ("GpuRequestCancelled", _("GPU request #%(id)s was cancelled.")),
        RequestState.EXPIRED: ("GpuRequestExpired", _("GPU request #%(id)s expired.")),
    }
    reason, text = words[req.state]
    message = text % {"id": req.pk}
    if req.decision_comment:
        message += " " + req.decision_comment
    if gated:
        message += " " + _("The Pod keeps its gate and will not start.")
    return reason, message


def carry(pods: Pods, cluster: Cluster, link: ClusterWorkload, pod: dict | None) -> None:
    """Carry the request's state to its Pod (``pod`` as listed; None: not listed)."""
    if link.state in (WorkloadState.ENDED,):
        return
    if link.state == WorkloadState.REFUSED:
        if pod is None:
            _update(link, state=WorkloadState.ENDED)
        elif link.told != WorkloadState.REFUSED:
            pods.event(pod, "GpuRequestRefused", link.error)
            _update(link, told=WorkloadState.REFUSED)
        return
    req = GpuRequest.objects.get(pk=link.request_id)
    if pod is None:
        if req.state in (RequestState.PENDING, RequestState.APPROVED, RequestState.ALLOCATED):
            end_request(req.pk)  # the Pod went: its request goes with it
        _update(link, state=WorkloadState.ENDED)
        return
    if req.state == RequestState.ALLOCATED and link.state == WorkloadState.GATED:
        if remove_gate(pods, pod, cluster.kueue):
            _update(link, state=WorkloadState.ADMITTED, error="")
    elif req.state in ENDED_BADLY and link.told != req.state:
        reason, message = _why(req, link.state == WorkloadState.GATED)
        pods.event(pod, reason, message)
        held = WorkloadState.HELD if link.state == WorkloadState.GATED else link.state
        _update(link, state=held, told=req.state)
    elif req.state == RequestState.RELEASED:
        owners = pod["metadata"].get("ownerReferences") or []
        if any(isinstance(o, dict) and o.get("kind") == "Job" for o in owners):
            # The Job would make it again: it is told, and its owner deletes the Job.
            pods.event(
                pod,
                "GpuRequestReleased",
                _("GPU request #%(id)s was released; delete the Job to stop it.") % {"id": req.pk},
            )
        else:
            pods.delete(pod["metadata"]["namespace"], pod["metadata"]["name"])
        _update(link, state=WorkloadState.ENDED, told=req.state)


def _update(link: ClusterWorkload, **fields) -> None:
    for key, value in fields.items():
        setattr(link, key, value)
    link.save(update_fields=[*fields, "updated"])


def pass_cluster(cluster: Cluster) -> dict[str, str]:
    """One pass over the cluster's mapped namespaces: ``{namespace: "ok" | error}``. A
    namespace whose list fails, or a Pod whose handling fails, stops nothing else."""
    results: dict[str, str] = {}
    api = api_client(cluster)
    try:
        pods = Pods(Kube(api))
        for mapping in cluster.namespaces.select_related("tenant"):
            results[mapping.namespace] = _pass_namespace(pods, cluster, mapping)
    finally:
        api.close()
        if cluster.ca_bundle:
            os.unlink(api.configuration.ssl_ca_cert)
    return results


def _pass_namespace(pods: Pods, cluster: Cluster, mapping: NamespaceMapping) -> str:
    try:
        listed = pods.list(mapping.namespace)
    except Exception as exc:
        logger.warning("cluster %s: listing Pods of %s failed: %s", cluster.name,
                       mapping.namespace, exc)  # fmt: skip
        return error_text(exc)
    by_uid = {}
    for pod in listed:
        uid = ((pod.get("metadata") or {}) if isinstance(pod, dict) else {}).get("uid")
        if isinstance(uid, str):
            by_uid[uid[:64]] = pod
        try:
            if isinstance(pod, dict) and is_gated(pod, cluster.kueue):
                admit_new(cluster, mapping, pod)
        except Exception:
            logger.exception("cluster %s: a Pod of %s failed", cluster.name, mapping.namespace)
    links = ClusterWorkload.objects.filter(cluster=cluster, namespace=mapping.namespace).exclude(
        state=WorkloadState.ENDED
    )
    for link in links:
        try:
            carry(pods, cluster, link, by_uid.get(link.uid))
        except Exception as exc:
            logger.warning("cluster %s: Pod %s/%s: %s", cluster.name, link.namespace, link.name,
                           exc)  # fmt: skip
            _update(link, error=error_text(exc)[:2000])
    return "ok"


def pass_all() -> dict[str, dict[str, str]]:
    """Every cluster, each on its own."""
    results = {}
    for cluster in Cluster.objects.select_related("pool"):
        try:
            results[cluster.name] = pass_cluster(cluster)
        except Exception as exc:
            logger.warning("cluster %s: gate pass failed: %s", cluster.name, exc)
            results[cluster.name] = {"": error_text(exc)}
    return results
