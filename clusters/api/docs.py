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
