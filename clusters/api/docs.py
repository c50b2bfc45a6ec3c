"""What the API documentation tells its readers about each cluster operation."""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

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
