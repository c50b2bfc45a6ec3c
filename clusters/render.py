"""The cluster's own quota objects for each tenant x pool quota (plain dicts, no I/O).

With Kueue (0.19, API kueue.x-k8s.io/v1beta2): one ResourceFlavor and cohort per pool, a
ClusterQueue per tenant (nominalQuota = guarantee, borrowingLimit = limit - guarantee) that
admits the tenant's mapped namespaces, and a LocalQueue in each of them. Without Kueue: a
core ResourceQuota in each mapped namespace, hard = the tenant's limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusters.choices import DEVICE_CLASSES, Enforcement
from quotas.interface import PoolQuota

KUEUE_API = "kueue.x-k8s.io/v1beta2"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "gpu-portal"
# HAMi's device plugin resources: cards (vGPUs), memory in MiB, cores in % of one card.
HAMI_GPU, HAMI_MEMORY, HAMI_CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"


@dataclass(frozen=True)
class Target:
    """What the portal writes: the cluster's ``enforcement`` and ``kueue``, which tenant's
    namespaces are which (tenant id -> namespaces) and the pool's slug."""

    enforcement: str
    kueue: bool
    pool_slug: str
    namespaces: dict[int, list[str]]


def dns_name(*parts: str) -> str:
    """A Kubernetes object name (RFC 1123) from slugs: lower case, '_' as '-'."""
    name = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return name[:63].rstrip("-")


POOL_LABEL, TENANT_LABEL = "gpu-portal.io/pool", "gpu-portal.io/tenant"


def owned_by(pool_slug: str) -> str:
    """The label selector of every object the portal writes for the pool."""
    return f"{MANAGED_BY}={MANAGER},{POOL_LABEL}={dns_name(pool_slug)}"


def _labels(pool_slug: str, quota: PoolQuota | None = None) -> dict[str, str]:
    labels = {MANAGED_BY: MANAGER, POOL_LABEL: dns_name(pool_slug)}
    if quota is not None:
        labels[TENANT_LABEL] = dns_name(quota.tenant_slug)
    return labels


def _kueue_resources(enforcement: str, q: PoolQuota) -> list[dict]:
    """Per resource its nominal quota and borrowing limit. DRA devices are counted under the
    device class's name, which Kueue's configuration maps (resources.deviceClassMappings);
    Kueue 0.19's quota on consumable capacity (memory, cores of a DRA device) is alpha and
    not written here."""
    if enforcement == Enforcement.HAMI:
        dims = [
            (HAMI_GPU, q.guaranteed_vgpus, q.limit_vgpus),
            (HAMI_MEMORY, q.guaranteed_memory_mib, q.limit_memory_mib),
            (HAMI_CORES, q.guaranteed_compute_pct, q.limit_compute_pct),
        ]
    else:
        dims = [(DEVICE_CLASSES[enforcement], q.guaranteed_vgpus, q.limit_vgpus)]
    return [
        {"name": name, "nominalQuota": guarantee, "borrowingLimit": max(limit - guarantee, 0)}
        for name, guarantee, limit in dims
    ]


def cluster_queue_name(q: PoolQuota) -> str:
    return dns_name("gp", q.pool_slug, q.tenant_slug)


def render(target: Target, quotas: list[PoolQuota]) -> list[dict]:
    """Every object the portal wants in the cluster, in the order to apply them."""
    objects: list[dict] = []
    if target.kueue:
        flavor = dns_name("gp", target.pool_slug)
        objects.append(
            {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
             "metadata": {"name": flavor, "labels": _labels(target.pool_slug)}, "spec": {}}
        )  # fmt: skip
    for q in quotas:
        namespaces = sorted(target.namespaces.get(q.tenant_id, []))
        if not target.kueue:
            objects.extend(_resource_quota(target.enforcement, q, ns) for ns in namespaces)
            continue
        resources = _kueue_resources(target.enforcement, q)
        queue = cluster_queue_name(q)
        objects.append({
            "apiVersion": KUEUE_API, "kind": "ClusterQueue",
            "metadata": {"name": queue, "labels": _labels(q.pool_slug, q)},
            "spec": {
                "cohortName": dns_name("gp", q.pool_slug),
                # Only the tenant's namespaces submit here (an empty list admits none).
                "namespaceSelector": {"matchExpressions": [{
                    "key": "kubernetes.io/metadata.name", "operator": "In",
                    "values": namespaces}]} if namespaces else {"matchLabels": {
                    "gpu-portal.io/no-namespace": "true"}},
                "resourceGroups": [{
                    "coveredResources": [r["name"] for r in resources],
                    "flavors": [{"name": dns_name("gp", q.pool_slug), "resources": resources}],
                }],
            },
        })  # fmt: skip
        objects.extend(
            {"apiVersion": KUEUE_API, "kind": "LocalQueue",
             "metadata": {"name": queue, "namespace": ns, "labels": _labels(q.pool_slug, q)},
             "spec": {"clusterQueue": queue}}
            for ns in namespaces
        )  # fmt: skip
    return objects


def _resource_quota(enforcement: str, q: PoolQuota, namespace: str) -> dict:
    """A namespace's hard limits. ResourceQuota counts extended resources by request only
    (``requests.<name>``) and DRA devices by class (``<class>.deviceclass.resource.k8s.io/
    devices``), not a device's memory or cores."""
    if enforcement == Enforcement.HAMI:
        hard = {
            f"requests.{HAMI_GPU}": str(q.limit_vgpus),
            f"requests.{HAMI_MEMORY}": str(q.limit_memory_mib),
            f"requests.{HAMI_CORES}": str(q.limit_compute_pct),
        }
    else:
        hard = {f"{DEVICE_CLASSES[enforcement]}.deviceclass.resource.k8s.io/devices":
                str(q.limit_vgpus)}  # fmt: skip
    return {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": dns_name("gp", q.pool_slug), "namespace": namespace,
                     "labels": _labels(q.pool_slug, q)},
        "spec": {"hard": hard},
    }  # fmt: skip
