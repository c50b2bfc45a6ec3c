"""What an approver weighs beside a waiting request: its tenant's quota in its pool,
what the tenant holds there now and what approving would leave (the Approvals page)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q
from django.utils.translation import gettext as _

from quotas.models import GpuRequest, Quota
from quotas.requests.services import allocated_usage, demand_of
from quotas.tenancy.usage import Usage


@dataclass(frozen=True)
class Outlook:
    """One quota dimension as an approver weighs a request: held now, what approving
    adds, and the limit (``over``: the sum passes it)."""

    name: str
    held: int
    asked: int
    limit: int
    unit: str  # "vgpus", "compute_pct" or "memory_mib", for the page to format

    @property
    def after(self) -> int:
        return self.held + self.asked

    @property
    def over(self) -> bool:
        return self.after > self.limit


def approval_outlook(requests: Iterable[GpuRequest]) -> dict[int, list[Outlook]]:
    """Per request: its tenant's quota in its pool, what the tenant's live allocations
    hold there and what approving would leave; a request without a quota is left out.
    One quota query, and one usage query per (tenant, pool), whatever the count."""
    requests = list(requests)
    pairs = {(r.tenant_id, r.pool_id) for r in requests}
    if not pairs:
        return {}
    wanted = Q()
    for tenant_id, pool_id in pairs:
        wanted |= Q(tenant_id=tenant_id, pool_id=pool_id)
    quotas = {(q.tenant_id, q.pool_id): q for q in Quota.objects.filter(wanted)}
    held = {pair: allocated_usage(*pair) for pair in pairs if pair in quotas}
    out: dict[int, list[Outlook]] = {}
    for req in requests:
        quota = quotas.get((req.tenant_id, req.pool_id))
        if quota is None:
            continue
        used, ask = held[(req.tenant_id, req.pool_id)], demand_of(req)
        if req.extension_hours:  # an extension asks for time, not for more of the pool
            ask = Usage()
        out[req.pk] = [
            Outlook(_("vGPUs"), used.vgpus, ask.vgpus, quota.limit_vgpus, "vgpus"),
            Outlook(_("Compute"), used.compute_pct, ask.compute_pct, quota.limit_compute_pct,
                    "compute_pct"),
            Outlook(_("Memory"), used.memory_mib, ask.memory_mib, quota.limit_memory_mib,
                    "memory_mib"),
        ]  # fmt: skip
    return out
