"""What the API documentation tells its readers about each cluster operation."""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample

CLUSTER_OPERATIONS: dict[str, Promise] = {
    "list": _(
        "The registered Kubernetes clusters (platform admins only): API URL, enforcement "
        "mode, Kueue or not, pool, mapped namespaces and the last sync's outcome or error. "
        "Tokens are never returned, only their hint."
    ),
    "retrieve": _("One cluster, as in the list."),
    "create": _(
        "Register a cluster with its service-account token, which is stored encrypted and "
        "never returned. A 400 answer names each field that is wrong; nothing is saved."
    ),
    "update": _(
        "Change a cluster: its name, API URL, CA bundle, enforcement and Kueue; the token only "
        "when a new one is given. The pool stays. Enforcement and Kueue cannot change while a "
        "workload of the cluster holds a GPU request (a 400 says how many). The cluster is "
        "synced once the change is saved."
    ),
    "partial_update": _("Change some of a cluster's fields, as a full change does."),
    "destroy": _(
        "Delete a cluster with its namespace mappings. Refused (409) while a workload of the "
        "cluster holds a GPU request: release those first. The portal's objects in the "
        "cluster are left there."
    ),
    "unmap_namespace": _(
        "Remove a namespace's mapping; the cluster's queue or ResourceQuota there goes at "
        "the sync that follows. Refused (409) while a workload in the namespace holds a GPU "
        "request."
    ),
    "namespaces": _(
        "Map a namespace of the cluster to a tenant: pods there run under the tenant's quota "
        "in the cluster's pool. A namespace belongs to one tenant; a 400 answer says why a "
        "mapping was refused."
    ),
}

JOB_OPERATIONS: dict[str, Promise] = {
    "create": _(
        "Make a Job in a mapped namespace of the cluster for the caller (a member of the "
        "namespace's tenant, or a platform admin): one container of the given image, command, "
        "arguments and environment, sized in vGPUs, compute % and memory MiB, gated until its "
        "GPU request, made here at once and answered with it, has its GPUs. Bad input is a 400 "
        "naming the field and nothing is written to the cluster; a cluster that does not answer "
        "is a 503 with Retry-After."
    ),
    "retrieve": _(
        "One Job made through the API, its request's state and what the cluster says of it "
        "now (job.outcome: waiting, running, succeeded, failed or gone)."
    ),
}

_JOB_ASKED = {
    "namespace": "vision-train", "image": "registry.example.com/vision/train:1.2",
    "command": ["python", "train.py"], "args": ["--epochs", "3"], "env": {"EPOCHS": "3"},
    "gpus": 1, "compute_pct": 25, "memory_mib": 8192, "duration_hours": 2,
    "reason": "nightly sweep",
}  # fmt: skip
_JOB_MADE = {
    "id": 12, "cluster": 1, "namespace": "vision-train", "kind": "Job",
    "name": "gpuctl-alice-3f9a1c2b7d", "uid": "6a1f0c2e-7d51-4c8e-9a55-0d3f6b1e2a47",
    "state": "gated", "request": 481, "request_state": "allocated", "error": "",
    "job": {"outcome": "waiting"}, "created": "2026-12-08T01:30:00Z",
}  # fmt: skip
JOB_CREATE_EXAMPLES = [
    OpenApiExample("A 25 % slice for two hours", value=_JOB_ASKED, request_only=True),
    OpenApiExample(
        "Made, its request placed at once",
        value=_JOB_MADE,
        response_only=True,
        status_codes=["201"],
    ),
]
JOB_READ_EXAMPLES = [
    OpenApiExample("Succeeded", response_only=True, status_codes=["200"], value={
        **_JOB_MADE, "state": "ended", "request_state": "released",
        "job": {"outcome": "succeeded", "active": 0, "succeeded": 1, "failed": 0}}),
]  # fmt: skip
