"""Gated workloads become GPU requests: the controller pass (docs/kubernetes.md, "Gated
workloads").

Each pass lists the Pods and Jobs of every mapped namespace. A workload carrying the
portal's gate (clusters.workloads says which) and not seen before (by uid) gets a GPU
request for the namespace's tenant in the cluster's pool, made by
``quotas.interface.create_request`` as any request is, so policy, quota and approval apply.
A Job is one request for the Pods it runs at once; the Pods a Job controls are its own,
never requests of their own. Then, each pass, the request's state is carried to the
workload: allocated, the gate is removed (from a Job's Pods as the Job makes them, or under
Kueue from the Job); rejected, cancelled or expired, an Event says why (the gate stays);
released, the workload is deleted; finished (a Pod succeeded or failed, a Job complete or
failed), its request is released. Every pass lists everything again, so a list that failed
is simply the next one.
"""

from __future__ import annotations

import contextvars
import logging
import os
import uuid

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import OperationalError, connection, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from kubernetes import client as k8s

from audit.interface import record
from clusters import readback
from clusters.choices import DEVICE_CLASSES, TAKEN_BACK
from clusters.devices import standalone_claims
from clusters.models import Cluster, ClusterWorkload, NamespaceMapping, WorkloadState
from clusters.sync import CONFLICT_RETRIES, Kube, api_client, error_text
from clusters.workloads import (
    API_VERSIONS,
    CLAIM_KEY,
    JOB,
    POD,
    Refused,
    claim_templates,
    finished,
    identity,
    is_gated,
    job_of,
    kind_of,
    made_from,
    parallel_pods,
    path_of,
    paused,
    removal,
    size_of,
)  # fmt: skip
from clusters.workloads import ask as ask_of
from quotas.choices import RequestState, Role
from quotas.interface import create_request, end_request
from quotas.models import GpuRequest, Membership

logger = logging.getLogger(__name__)

COMPONENT = "gpu-portal"
ENDED_BADLY = {RequestState.REJECTED, RequestState.CANCELLED, RequestState.EXPIRED}
HELD_OPEN = (RequestState.PENDING, RequestState.APPROVED, RequestState.ALLOCATED)
# Set while a pass runs in this thread: the request steps it makes need no pass of their own.
_PASSING: contextvars.ContextVar[bool] = contextvars.ContextVar("gate_pass", default=False)


def in_pass() -> bool:
    return _PASSING.get()


def requester_of(mapping: NamespaceMapping):
    """The namespace's own portal user, a member of its tenant: the requester of its
    workloads' requests (a Pod says nothing trustworthy about who made it). Made on first use."""
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


def _messages(exc: ValidationError) -> str:
    if hasattr(exc, "message_dict"):
        return " ".join(m for ms in exc.message_dict.values() for m in ms)
    return " ".join(exc.messages)


def admit_new(
    cluster: Cluster, mapping: NamespaceMapping, obj: dict, templates: dict | None = None
) -> ClusterWorkload | None:
    """Link a gated workload seen for the first time to a new request (or to the reason it
    got none); one already linked is left to ``carry``. None for one without identity.
    ``templates``: the ResourceClaimTemplates it names, read, by name (None: not found)."""
    kind = kind_of(obj)
    try:
        name, namespace, uid = identity(obj)
    except Refused as exc:
        logger.warning("cluster %s: a %s refused: %s", cluster.name, kind, exc)
        return None
    found = ClusterWorkload.objects.filter(cluster=cluster, uid=uid).first()
    if found is not None:
        return found
    with transaction.atomic():
        link = ClusterWorkload(cluster=cluster, namespace=namespace, kind=kind, name=name, uid=uid,
                               claims=standalone_claims(obj) if kind == POD
                               and cluster.enforcement in DEVICE_CLASSES else [])  # fmt: skip
        try:
            size = size_of(obj, templates, DEVICE_CLASSES.get(cluster.enforcement, ""))
            link.request = create_request(requester_of(mapping), tenant=mapping.tenant,
                                          pool=cluster.pool, **ask_of(obj, size))  # fmt: skip
        except (Refused, ValidationError) as exc:
            text = _messages(exc) if isinstance(exc, ValidationError) else str(exc)
            logger.warning("cluster %s: %s %s/%s refused: %s", cluster.name, kind, namespace,
                           name, text)  # fmt: skip
            link.state, link.error = WorkloadState.REFUSED, text[:2000]
        link.save()
    return link


class Workloads:
    """The pass's calls for Pods and Jobs, raw JSON through the official client."""

    def __init__(self, kube: Kube):
        self.kube = kube
        self.reader = readback.Reader(kube)  # read-back's lists, once a pass

    def list(self, kind: str, namespace: str) -> list[dict]:
        items = self.kube.call("GET", path_of(kind, namespace)).get("items", [])
        # A list's items carry no kind of their own: the collection says what they are.
        return [{**item, "kind": kind} for item in items if isinstance(item, dict)]

    def claim_template(self, namespace: str, name: str) -> dict | None:
        """A ResourceClaimTemplate, or a standalone ResourceClaim named ``CLAIM_KEY + name``."""
        plural = "resourceclaimtemplates"
        if name.startswith(CLAIM_KEY):
            plural, name = "resourceclaims", name.removeprefix(CLAIM_KEY)
        return self.kube.get(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/{plural}/{name}")

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        found = self.kube.get(path_of(kind, namespace, name))
        return None if found is None else {**found, "kind": kind}

    def patch(self, obj: dict, ops: list[dict]) -> dict:
        meta = obj["metadata"]
        return self.kube.call("PATCH", path_of(kind_of(obj), meta["namespace"], meta["name"]),
                              ops, content_type="application/json-patch+json")  # fmt: skip

    def delete(self, obj: dict) -> None:
        meta = obj["metadata"]
        # A Job's Pods go with it (the API's default for a Job leaves them orphaned).
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        try:
            self.kube.call("DELETE", path_of(kind_of(obj), meta["namespace"], meta["name"]),
                           body if kind_of(obj) == JOB else None)  # fmt: skip
        except k8s.ApiException as exc:
            if exc.status != 404:  # gone already: what was wanted
                raise

    def event(self, obj: dict, reason: str, message: str, kind: str = "Warning") -> dict:
        meta = obj["metadata"]
        now = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name'][:200]}.{uuid.uuid4().hex[:16]}",
                         "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": API_VERSIONS[kind_of(obj)], "kind": kind_of(obj),
                               "name": meta["name"], "namespace": meta["namespace"],
                               "uid": meta["uid"]},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        return self.kube.call("POST", f"/api/v1/namespaces/{meta['namespace']}/events", event)


def remove_gate(calls: Workloads, obj: dict, kueue: bool) -> bool:
    """Take the gate off; True once it is off (by us or anyone). A 409 or a failed test (the
    object changed between the read and the patch) reads it again and retries."""
    meta = obj["metadata"]
    for _try in range(CONFLICT_RETRIES):
        ops = removal(obj, kueue)
        if ops is None:
            return True
        try:
            calls.patch(obj, ops)
            return True
        except k8s.ApiException as exc:
            if exc.status == 404:
                return True  # deleted meanwhile: nothing left to gate
            if exc.status not in (409, 422):
                raise
            logger.info("%s on %s %s/%s: reading it again", exc.status, kind_of(obj),
                        meta["namespace"], meta["name"])  # fmt: skip
        obj = calls.read(kind_of(obj), meta["namespace"], meta["name"])
        if obj is None:
            return True  # deleted meanwhile: nothing left to gate
    return False


def _why(req: GpuRequest, gated: bool, kind: str) -> tuple[str, str]:
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
    if gated and kind == JOB:
        message += " " + _("The Job's Pods keep their gate and will not start.")
    elif gated:
        message += " " + _("The Pod keeps its gate and will not start.")
    return reason, message


def _ungate_pods(calls: Workloads, job: dict, pods: list[dict]) -> bool:
    """A Job's Pods, as its controller makes them, lose the gate, no more of them running at
    once than the request was sized for, and only those asking what the Job's template
    asks; True when none is left waiting for it. One Pod's failure stops no other."""
    running = [p for p in pods if not is_gated(p, False) and not finished(p)]
    room = parallel_pods(job) - len(running)
    waiting = sorted((p for p in pods if is_gated(p, False) and not finished(p)),
                     key=lambda p: str(p["metadata"].get("creationTimestamp", "")))  # fmt: skip
    done = True
    for pod in waiting:
        meta = pod["metadata"]
        if not made_from(pod, job):
            logger.warning("Pod %s/%s names Job %s as its owner but asks otherwise: left "
                           "gated", meta.get("namespace"), meta.get("name"),
                           job["metadata"]["name"])  # fmt: skip
            continue
        if room <= 0:
            done = False  # the next pass, once one of the running ones has finished
            continue
        try:
            if remove_gate(calls, pod, kueue=False):
                room -= 1
            else:
                done = False
        except Exception as exc:
            logger.warning("Pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
            done = False
    return done


def carry(
    calls: Workloads,
    cluster: Cluster,
    link: ClusterWorkload,
    obj: dict | None,
    pods: list[dict] | tuple = (),
) -> None:
    """Carry the request's state to its workload (``obj`` as listed, None: not listed;
    ``pods``: the Pods a listed Job controls)."""
    if link.state == WorkloadState.ENDED:
        return
    if link.state == WorkloadState.REFUSED:
        if obj is None:
            _update(link, state=WorkloadState.ENDED)
        elif link.told != WorkloadState.REFUSED:
            calls.event(obj, "GpuRequestRefused", link.error)
            _update(link, told=WorkloadState.REFUSED)
        return
    req = GpuRequest.objects.get(pk=link.request_id)
    if obj is None or finished(obj):
        if req.state in HELD_OPEN:
            end_request(req.pk)  # the workload went or is done: its request goes with it
            if obj is not None and req.state == RequestState.ALLOCATED:
                calls.event(obj, "GpuRequestReleased", _(
                    "GPU request #%(id)s was released: the %(kind)s finished."
                ) % {"id": req.pk, "kind": link.kind}, kind="Normal")  # fmt: skip
        if req.state in (RequestState.ALLOCATED, RequestState.RELEASED):
            # Released now or before (a deletion that failed is done again): its claims go.
            readback.delete_claims(calls.kube, cluster, link, obj)
        _update(link, state=WorkloadState.ENDED)
        return
    if req.state == RequestState.ALLOCATED and link.reclaim_after and not link.reclaim_told:
        calls.event(obj, "GpuRequestReclaimWarning", _reclaim_text(req, link))
        _update(link, reclaim_told=True)
    if req.state == RequestState.ALLOCATED and link.kind == JOB and not cluster.kueue:
        # The Job makes its Pods gated (retries and later completions too): each pass lifts
        # the gate of those it has made since, for as long as the request holds its GPUs.
        if _ungate_pods(calls, obj, pods) and link.state == WorkloadState.GATED:
            _update(link, state=WorkloadState.ADMITTED, error="")
    elif req.state == RequestState.ALLOCATED and link.state == WorkloadState.GATED:
        if remove_gate(calls, obj, cluster.kueue):
            _update(link, state=WorkloadState.ADMITTED, error="")
    elif req.state in ENDED_BADLY and link.told != req.state:
        reason, message = _why(req, link.state == WorkloadState.GATED, link.kind)
        calls.event(obj, reason, message)
        held = WorkloadState.HELD if link.state == WorkloadState.GATED else link.state
        _update(link, state=held, told=req.state)
    elif req.state == RequestState.RELEASED:
        if link.kind == POD and job_of(obj):
            # A Job's Pod linked on its own (before Jobs were workloads): the Job would only
            # make it again, so it is told, and its owner deletes the Job.
            text = _("GPU request #%(id)s was released; delete the Job to stop it.")
            calls.event(obj, "GpuRequestReleased", text % {"id": req.pk})
        else:
            if link.reclaim_cause == TAKEN_BACK:  # evicted with notice: its last word
                text = _("GPU request #%(id)s was taken back; the %(kind)s is deleted.")
                calls.event(obj, "GpuRequestReclaimed", text % {"id": req.pk, "kind": link.kind})
            calls.delete(obj)
            readback.delete_claims(calls.kube, cluster, link, obj)
        _update(link, state=WorkloadState.ENDED, told=req.state)
    if req.state == RequestState.ALLOCATED and link.state == WorkloadState.ADMITTED:
        readback.read_back(calls.reader, cluster, link, req, obj, pods)


def _reclaim_text(req: GpuRequest, link: ClusterWorkload) -> str:
    when = timezone.localtime(link.reclaim_after).strftime("%Y-%m-%d %H:%M %Z")
    if link.reclaim_cause == "borrowed":
        text = _("GPU request #%(id)s holds borrowed GPUs that another team needs: they are "
                 "taken back after %(when)s and the %(kind)s is deleted.")  # fmt: skip
    else:
        text = _("GPU request #%(id)s has been idle: unless its GPUs are used again, they are "
                 "taken back after %(when)s and the %(kind)s is deleted.")  # fmt: skip
    return text % {"id": req.pk, "when": when, "kind": link.kind}


def _update(link: ClusterWorkload, **fields) -> None:
    for key, value in fields.items():
        setattr(link, key, value)
    link.save(update_fields=[*fields, "updated"])


def pass_cluster(cluster: Cluster) -> dict[str, str]:
    """One pass over the cluster's mapped namespaces: ``{namespace: "ok" | error}``. A
    namespace whose list fails, or a workload whose handling fails, stops nothing else."""
    results: dict[str, str] = {}
    if not _lock(cluster.pk):
        return {"": BUSY}  # another pass of this cluster runs: it sees what this one would
    try:
        api = api_client(cluster)
        passing = _PASSING.set(True)
        try:
            calls = Workloads(Kube(api))
            for mapping in cluster.namespaces.select_related("tenant"):
                results[mapping.namespace] = _pass_namespace(calls, cluster, mapping)
        finally:
            _PASSING.reset(passing)
            api.close()
            if cluster.ca_bundle:
                os.unlink(api.configuration.ssl_ca_cert)
    finally:
        _unlock(cluster.pk)
    return results


# PostgreSQL advisory locks (session level) keyed by this constant and the cluster's id:
# two passes of one cluster at once could each end what the other admitted after its list.
_LOCK_CLASS = 0x67617465  # "gate"
BUSY = "busy"


class PassRunning(Exception):
    """A gate pass of the cluster held its lock longer than the caller would wait."""


def hold_pass(cluster_id: int, wait_s: float) -> None:
    """Take the cluster's gate-pass lock until the end of the current transaction (call it
    inside ``transaction.atomic``): a pass starting meanwhile finds the cluster busy, and a
    running one is waited for up to ``wait_s`` seconds. Raises PassRunning past that."""
    if not connection.in_atomic_block:
        raise RuntimeError("hold_pass needs a transaction")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {max(1, int(wait_s * 1000))}")
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_CLASS, cluster_id])
            cursor.execute("SET LOCAL lock_timeout TO DEFAULT")
    except OperationalError as exc:
        raise PassRunning(_("A gate pass of this cluster is running; retry in a moment.")) from exc


def _lock(cluster_id: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [_LOCK_CLASS, cluster_id])
        return bool(cursor.fetchone()[0])


def _unlock(cluster_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [_LOCK_CLASS, cluster_id])


def _uid(obj: dict) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid") if isinstance(obj.get("metadata"), dict) else None
    return uid[:64] if isinstance(uid, str) else None


def _templates(calls: Workloads, cluster: Cluster, obj: dict, read: dict, namespace: str) -> dict:
    """The claim templates a new workload names, on a DRA cluster; a failed read (not a
    404) leaves the workload to the next pass rather than refusing it."""
    if cluster.enforcement not in DEVICE_CLASSES:
        return {}
    for name in claim_templates(obj):
        if name not in read:
            read[name] = calls.claim_template(namespace, name[:253])
    return {name: read[name] for name in claim_templates(obj)}


def _list(calls: Workloads, cluster: Cluster, kind: str, namespace: str) -> list[dict] | str:
    try:
        return calls.list(kind, namespace)
    except Exception as exc:
        logger.warning("cluster %s: listing the %ss of %s failed: %s", cluster.name, kind,
                       namespace, exc)  # fmt: skip
        return error_text(exc)


def _pass_namespace(calls: Workloads, cluster: Cluster, mapping: NamespaceMapping) -> str:
    # Links made after this moment were not in the lists below: not listed is not gone.
    listed_at = timezone.now()
    pods = _list(calls, cluster, POD, mapping.namespace)
    if isinstance(pods, str):
        return pods
    # Jobs apart: a cluster whose service account may not list Jobs (a 403) still has its
    # Pods carried; its Job links wait, and Pods a Job controls are left alone.
    jobs = _list(calls, cluster, JOB, mapping.namespace)
    jobs_error = jobs if isinstance(jobs, str) else ""
    listed = pods + ([] if jobs_error else jobs)
    job_uids = {_uid(job) for job in listed if kind_of(job) == JOB}
    by_uid: dict[str, dict] = {}
    pods_of_job: dict[str, list[dict]] = {}
    templates: dict[str, dict | None] = {}  # read once a pass, for the workloads naming them
    # Which of them are linked already, in one query (admit_new checks again, for itself).
    uids = [uid for uid in map(_uid, listed) if uid]
    linked = set(
        ClusterWorkload.objects.filter(cluster=cluster, uid__in=uids).values_list("uid", flat=True)
    )
    for obj in listed:
        uid = _uid(obj)
        if uid:
            by_uid[uid] = obj
        job = job_of(obj) if kind_of(obj) == POD else None
        if job and (jobs_error or job in job_uids):
            pods_of_job.setdefault(job, []).append(obj)
            continue  # the Job's, never a request of its own
        try:
            if is_gated(obj, cluster.kueue) and not paused(obj) and uid not in linked:
                admit_new(cluster, mapping, obj, _templates(calls, cluster, obj, templates,
                                                               mapping.namespace))  # fmt: skip
        except Exception:
            logger.exception("cluster %s: a workload of %s failed", cluster.name,
                             mapping.namespace)  # fmt: skip
    links = ClusterWorkload.objects.filter(cluster=cluster, namespace=mapping.namespace).exclude(
        state=WorkloadState.ENDED
    )
    if jobs_error:
        links = links.exclude(kind=JOB)
    for link in links:
        if link.uid not in by_uid and link.created >= listed_at:
            continue  # linked by another pass after these lists: not listed is not gone
        try:
            carry(calls, cluster, link, by_uid.get(link.uid), pods_of_job.get(link.uid, []))
        except Exception as exc:
            logger.warning("cluster %s: %s %s/%s: %s", cluster.name, link.kind, link.namespace,
                           link.name, exc)  # fmt: skip
            _update(link, error=error_text(exc)[:2000])
    return jobs_error or "ok"


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
