"""A Job made by the portal for a caller (``POST /api/v1/clusters/{cluster}/jobs/``,
``gpuctl run --cluster``): checked, asked for as any request is, written into the mapped
namespace through the cluster's service account, and linked to its request at once.

The order keeps the cluster clean: the input is checked (clusters.jobspec) and the request
made (``quotas.interface.create_request``: policy, quota, approval) before anything is
written, so bad input or a refusal leaves nothing in the cluster; then the Job (and, on a
DRA cluster, its ResourceClaimTemplate, owned by the Job) is created and linked in the same
transaction. The cluster's gate pass is kept out meanwhile (its advisory lock, held until
the transaction ends), so no pass lists the new Job before its link is committed and asks
for it a second time. A write that fails undoes the request and deletes what was written.
"""

from __future__ import annotations

import logging
import os

from django.db import transaction
from django.utils.translation import gettext as _
from kubernetes import client as k8s

from audit.interface import record
from clusters.choices import DEVICE_CLASSES
from clusters.gates import PassRunning, Workloads, hold_pass, requester_of
from clusters.jobspec import Invalid, JobAsk, check, claim_template, job, job_name, outcome
from clusters.models import Cluster, ClusterWorkload, NamespaceMapping
from clusters.render import dns_name
from clusters.sync import Kube, api_client, error_text
from clusters.workloads import JOB, Refused, path_of, size_of
from clusters.workloads import ask as ask_of
from quotas.interface import create_request
from quotas.permissions import is_platform_admin, role_in, tenant_ids_of

logger = logging.getLogger(__name__)

LOCK_WAIT_S = 10  # the longest wait for a running gate pass of the cluster
RETRY_AFTER_S = 30  # what a caller is told to wait when the cluster does not answer


class Unavailable(Exception):
    """The cluster did not answer (or answered 5xx), or its gate pass held it too long."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_S, *, busy: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.busy = busy  # a gate pass held it: the message is ours, translated


class ClusterRefused(Exception):
    """The cluster answered the write with a 4xx (a service account without the right)."""


class NotYours(Exception):
    """The namespace belongs to a tenant the caller is not a member of."""


def usable_clusters(user):
    """The clusters a user may submit to and read Jobs of: all for platform admins, else
    those with a namespace mapped to one of the user's tenants."""
    rows = Cluster.objects.select_related("pool")
    if is_platform_admin(user):
        return rows
    return rows.filter(namespaces__tenant_id__in=tenant_ids_of(user)).distinct()


def _take_pass_lock(cluster_id: int) -> None:
    """The cluster's gate-pass lock for this transaction (a pass finds it busy)."""
    try:
        hold_pass(cluster_id, LOCK_WAIT_S)
    except PassRunning as exc:
        raise Unavailable(str(exc), retry_after=2, busy=True) from exc


def _write_error(exc: Exception) -> Exception:
    if isinstance(exc, _NoUid):
        return ClusterRefused(str(exc))
    status = getattr(exc, "status", None)
    if isinstance(exc, k8s.ApiException) and status and 400 <= status < 500:
        return ClusterRefused(error_text(exc))
    return Unavailable(error_text(exc))


def submit_job(cluster: Cluster, user, ask: JobAsk, *, address: str | None = None):
    """Make the Job and its request; the link (``ClusterWorkload``) with its request.
    Raises Invalid or ValidationError (bad input, refused request: nothing written),
    NotYours, Unavailable or ClusterRefused (the cluster's answer: nothing kept)."""
    check(ask, cluster.enforcement)
    mapping = (
        NamespaceMapping.objects.select_related("tenant", "cluster")
        .filter(cluster=cluster, namespace=ask.namespace)
        .first()
    )
    if mapping is None:
        text = _("%(namespace)s is not a mapped namespace of cluster %(cluster)s.")
        raise Invalid({"namespace": [text % {"namespace": ask.namespace[:63],
                                             "cluster": cluster.name}]})  # fmt: skip
    member = role_in(user, mapping.tenant_id) is not None
    if not member and not is_platform_admin(user):
        raise NotYours(mapping.namespace)
    username = user.get_username()
    name = job_name(username)
    device_class = DEVICE_CLASSES.get(cluster.enforcement, "")
    queue = dns_name("gp", cluster.pool.slug, mapping.tenant.slug)
    manifest = job(ask, name=name, user_id=user.pk, username=username,
                   enforcement=cluster.enforcement, kueue=cluster.kueue,
                   queue=queue)  # fmt: skip
    template = claim_template(ask, name, device_class) if device_class else None
    # Sized by the pass's own readers: what is written is what the pass would ask.
    try:
        size = size_of(manifest, {name: template} if template else {}, device_class)
        fields = ask_of(manifest, size)
    except Refused as exc:  # what check() let through and the pass would refuse
        raise Invalid({"non_field_errors": [str(exc)]}) from exc
    with transaction.atomic():
        _take_pass_lock(cluster.pk)
        # A platform admin outside the tenant asks as the namespace's own requester.
        requester = user if member else requester_of(mapping)
        req = create_request(requester, tenant=mapping.tenant, pool=cluster.pool,
                             address=address, **fields)  # fmt: skip
        uid = _write(cluster, manifest, template)
        link = ClusterWorkload.objects.create(
            cluster=cluster, namespace=ask.namespace, kind=JOB, name=name, uid=uid,
            request=req,
        )  # fmt: skip
        record("cluster.job_created", cluster, actor=user, address=address,
               tenant_id=mapping.tenant_id,
               after={"namespace": ask.namespace, "job": name, "request": req.pk,
                      "image": ask.image})  # fmt: skip
    return link


class _NoUid(Exception):
    pass


def _write(cluster: Cluster, manifest: dict, template: dict | None) -> str:
    """Create the Job (then its claim template, owned by it): the Job's uid. On a failure,
    or an answer without a uid, delete what was made (best effort) and raise Unavailable or
    ClusterRefused."""
    api = api_client(cluster)
    calls = Workloads(Kube(api))
    namespace = manifest["metadata"]["namespace"]
    try:
        created = calls.kube.call("POST", path_of(JOB, namespace), manifest)
        meta = created.get("metadata") if isinstance(created, dict) else None
        uid = meta.get("uid") if isinstance(meta, dict) else None
        if not isinstance(uid, str) or not 0 < len(uid) <= 64:
            raise _NoUid("the cluster answered the Job's create without a uid")
        if template is not None:
            owned = {**template, "metadata": {**template["metadata"], "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": JOB, "name": manifest["metadata"]["name"],
                "uid": uid, "controller": False, "blockOwnerDeletion": True}]}}  # fmt: skip
            calls.kube.call(
                "POST",
                f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates",
                owned,
            )
        return uid
    except Exception as exc:
        logger.warning("cluster %s: writing Job %s/%s failed: %s", cluster.name, namespace,
                       manifest["metadata"]["name"], exc)  # fmt: skip
        try:  # the answer may have been lost after the Job was made
            calls.delete({**manifest, "kind": JOB})
        except Exception as cleanup:
            logger.warning("cluster %s: deleting Job %s/%s failed: %s", cluster.name,
                           namespace, manifest["metadata"]["name"], cleanup)  # fmt: skip
        raise _write_error(exc) from exc
    finally:
        api.close()
        if cluster.ca_bundle:
            os.unlink(api.configuration.ssl_ca_cert)


def job_state(link: ClusterWorkload) -> dict:
    """The linked Job as the cluster reports it now: ``outcome`` (clusters.jobspec.outcome,
    or ``unknown`` when the cluster does not answer, with ``error``) and its counts."""
    api = api_client(link.cluster)
    try:
        found = Workloads(Kube(api)).read(JOB, link.namespace, link.name)
    except Exception as exc:
        return {"outcome": "unknown", "error": error_text(exc)}
    finally:
        api.close()
        if link.cluster.ca_bundle:
            os.unlink(api.configuration.ssl_ca_cert)
    if found is not None and found["metadata"].get("uid", "")[:64] != link.uid:
        found = None  # another Job of the same name since: ours is gone
    status = (found or {}).get("status") or {}
    return {"outcome": outcome(found),
            **{k: status.get(k, 0) for k in ("active", "succeeded", "failed")}}  # fmt: skip


__all__ = ["ClusterRefused", "Invalid", "JobAsk", "NotYours", "Unavailable", "job_state",
           "submit_job", "usable_clusters"]  # fmt: skip
