"""Each tenant's quota in one pool, as plain values for the apps above (clusters writes
them into Kubernetes as the cluster's own quota objects)."""

from __future__ import annotations

from dataclasses import dataclass

from quotas.models import Quota


@dataclass(frozen=True)
class PoolQuota:
    tenant_id: int
    tenant_slug: str
    pool_id: int
    pool_slug: str
    guaranteed_vgpus: int
    limit_vgpus: int
    guaranteed_compute_pct: int
    limit_compute_pct: int
    guaranteed_memory_mib: int
    limit_memory_mib: int


def pool_quotas(pool_id: int) -> list[PoolQuota]:
    """The quotas of pool ``pool_id``, one per tenant, in tenant order."""
    rows = Quota.objects.filter(pool_id=pool_id).select_related("tenant", "pool")
    return [
        PoolQuota(
            tenant_id=q.tenant_id,
            tenant_slug=q.tenant.slug,
            pool_id=q.pool_id,
            pool_slug=q.pool.slug,
            guaranteed_vgpus=q.guaranteed_vgpus,
            limit_vgpus=q.limit_vgpus,
            guaranteed_compute_pct=q.guaranteed_compute_pct,
            limit_compute_pct=q.limit_compute_pct,
            guaranteed_memory_mib=q.guaranteed_memory_mib,
            limit_memory_mib=q.limit_memory_mib,
        )
        for q in rows.order_by("tenant__slug")
    ]
