"""The idle report's rows as the page, the CSV and the API read them: the last scan's
verdicts with the names around them, narrowed to what the reader may see."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from io import StringIO
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from agents.models import GPU, Node
from quotas.models import Tenant
from quotas.permissions import can_approve
from reports import permissions
from reports.choices import OPEN_WARNINGS
from reports.models import AllocationIdle, Exemption, IdleCard, ReclaimWarning


def visible_rows(user) -> QuerySet[AllocationIdle]:
    rows = AllocationIdle.objects.select_related(
        "allocation__gpu__node", "lease__holder", "pool"
    ).order_by("-idle", "-wasted_gpu_hours", "allocation_id")
    lease_ids = permissions.visible_lease_ids(user)
    return rows if lease_ids is None else rows.filter(lease_id__in=lease_ids)


def visible_cards(user) -> QuerySet[IdleCard]:
    if not permissions.sees_everything(user):
        return IdleCard.objects.none()
    # The card and node are plain ids in the scan's snapshot: their names are read here,
    # in the same query, so the table names (and links) them rather than showing ids.
    return (
        IdleCard.objects.select_related("pool")
        .annotate(
            node_name=Subquery(Node.objects.filter(pk=OuterRef("node_id")).values("name")[:1]),
            gpu_index=Subquery(GPU.objects.filter(pk=OuterRef("gpu_id")).values("index")[:1]),
        )
        .order_by("state", "pool__name", "node_name", "gpu_index", "gpu_id")
    )


def decorate(rows: Iterable[AllocationIdle], user=None) -> list[AllocationIdle]:
    """Attach the tenant, the open warning and the live exemption to each row (three
    queries for the page, whatever its length), and what ``user`` may do with it."""
    rows = list(rows)
    lease_ids = {r.lease_id for r in rows}
    tenant_ids = {r.tenant_id for r in rows if r.tenant_id}
    tenants = dict(Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "name"))
    warnings = {
        w.lease_id: w
        for w in ReclaimWarning.objects.filter(lease_id__in=lease_ids, state__in=OPEN_WARNINGS)
    }
    exemptions = {
        e.lease_id: e
        for e in Exemption.objects.filter(lease_id__in=lease_ids, ends_at__gt=timezone.now())
    }
    for row in rows:
        row.tenant_name = tenants.get(row.tenant_id, "")
        row.warning = warnings.get(row.lease_id)
        row.exemption = exemptions.get(row.lease_id)
    if user is not None:
        everything = permissions.sees_everything(user)
        approves: dict[int | None, bool] = {}
        for row in rows:
            if row.tenant_id not in approves:
                approves[row.tenant_id] = everything or (
                    row.tenant_id is not None and can_approve(user, row.tenant_id)
                )
            row.may_exempt = approves[row.tenant_id]
            row.may_decide = row.may_exempt and row.lease.holder_id != user.pk
    return rows


CSV_COLUMNS = (
    "allocation", "lease", "tenant", "pool", "node", "gpu", "owner", "unix_user", "idle",
    "idle_since", "idle_hours", "wasted_gpu_hours", "compute_pct", "memory_mib",
    "p95_util_pct", "p95_memory_mib", "over_provisioned", "advice_compute_pct",
    "advice_memory_mib", "warned", "exempt_until",
)  # fmt: skip


def as_dict(row: AllocationIdle) -> dict[str, Any]:
    alloc = row.allocation
    gpu = alloc.gpu
    return {
        "allocation": row.allocation_id, "lease": row.lease_id,
        "tenant": getattr(row, "tenant_name", ""), "pool": row.pool.slug,
        "node": gpu.node.hostname if gpu else "", "gpu": gpu.index if gpu else "",
        "owner": row.lease.holder.get_username(), "unix_user": row.lease.unix_user,
        "idle": row.idle, "idle_since": row.idle_since.isoformat() if row.idle_since else "",
        "idle_hours": round(row.idle_minutes / 60, 2), "wasted_gpu_hours": row.wasted_gpu_hours,
        "compute_pct": alloc.compute_pct, "memory_mib": alloc.memory_mib,
        "p95_util_pct": row.p95_util_pct, "p95_memory_mib": row.p95_memory_mib,
        "over_provisioned": row.over_provisioned,
        "advice_compute_pct": row.advice_compute_pct, "advice_memory_mib": row.advice_memory_mib,
        "warned": bool(getattr(row, "warning", None)),
        "exempt_until": row.exemption.ends_at.isoformat()
        if getattr(row, "exemption", None) else "",
    }  # fmt: skip


def _safe(value: Any) -> Any:
    # A cell starting with = + - @ is a formula to a spreadsheet: quote it.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@"):
        return "'" + value
    return value


def csv_lines(rows: Iterable[AllocationIdle], chunk: int = 500) -> Iterator[str]:
    buffer = StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    batch: list[AllocationIdle] = []

    def flush() -> str:
        for row in decorate(batch):
            data = as_dict(row)
            writer.writerow([_safe(data[c]) for c in CSV_COLUMNS])
        batch.clear()
        out = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return out

    for row in rows:
        batch.append(row)
        if len(batch) >= chunk:
            yield flush()
    yield flush()
