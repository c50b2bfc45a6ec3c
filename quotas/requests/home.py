"""A developer's home (``/home/``): my vGPUs with their live use against their share, my
requests and their state, what my tenants' quotas leave, and who lands there from "/".

Plain functions over a user, for the page, its live part and its socket's pushes; the
rules of who sees what are ``quotas.requests.permissions`` and ``quotas.permissions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Case, IntegerField, Value, When
from django.http import HttpRequest
from django.urls import reverse

from pools.choices import AllocationState
from pools.models import Allocation
from quotas.choices import OPEN_STATES
from quotas.permissions import User, is_platform_admin, tenant_ids_of
from quotas.requests.permissions import visible_requests
from quotas.requests.services import queue_position
from quotas.tenancy.usage import quota_usage
from telemetry import interface as telemetry

# Who sees the fleet as a whole: platform admins and the operators of nodes and pools
# (and of every process owner). Anyone else who is a tenant's member lands on home.
FLEET_PERMISSIONS = (
    "agents.view_node", "agents.add_node", "agents.change_node", "agents.delete_node",
    "pools.add_pool", "pools.change_pool", "pools.delete_pool",
    "telemetry.view_process_owners",
)  # fmt: skip
LIVE = (AllocationState.ACTIVE, AllocationState.STRANDED)
RECENT_REQUESTS = 20


def sees_the_fleet(user: User) -> bool:
    if not user.is_authenticated:
        return False
    return is_platform_admin(user) or any(user.has_perm(p) for p in FLEET_PERMISSIONS)


def lands_on_home(user: User) -> bool:
    """Whether "/" sends ``user`` here: a member of some tenant without the fleet's view.
    A user in no tenant has nothing here yet and keeps the fleet, which everyone reads."""
    return user.is_authenticated and not sees_the_fleet(user) and tenant_ids_of(user).exists()


def detour(request: HttpRequest) -> str | None:
    """The fleet dashboard's detour (``telemetry.interface.add_dashboard_detour``)."""
    return reverse("requests:home") if lands_on_home(request.user) else None


# --- my vGPUs ---------------------------------------------------------------------------


def my_allocations(user: User):
    """The live vGPUs of the leases ``user`` holds (placed, or waiting for re-placement)."""
    if not user.is_authenticated:
        return Allocation.objects.none()
    return (
        Allocation.objects.filter(lease__holder_id=user.pk, state__in=LIVE)
        .select_related("gpu__node", "pool", "lease__gpu_request")
        .order_by("-lease__created", "pk")
    )


def live_use(allocations: list[Allocation]) -> dict[int, dict[str, Any]]:
    """Per allocation, what its card and its agent report now: the card's utilization
    (%, all slices on it together: the agent measures no slice's compute alone), the
    memory the allocation's own processes use (the agent's slices report; for a whole card
    without one, the card's), their count and when the node was last heard from. Fields
    nobody reported are None. One read of the latest readings for all their nodes."""
    placed = [a for a in allocations if a.gpu_id and a.state == AllocationState.ACTIVE]
    readings = telemetry.latest({a.gpu.node_id for a in placed})
    out: dict[int, dict[str, Any]] = {}
    for a in allocations:
        use: dict[str, Any] = {
            "id": a.pk, "compute_pct": a.compute_pct, "memory_mib": a.memory_mib,
            "card_util_pct": None, "memory_used_mib": None, "process_count": None,
            "seen_at": None,
        }  # fmt: skip
        reading = readings.get(a.gpu.node_id) if a in placed else None
        if reading is not None:
            card = reading.cards.get(a.gpu.uuid)
            use["seen_at"] = reading.seen_at.timestamp()
            if card is not None:
                use["card_util_pct"] = card.values.get("utilization_gpu_pct")
            mine = next((r for r in reading.allocations if r["allocation_id"] == a.agent_id), None)
            if mine is not None:
                use["memory_used_mib"] = mine.get("memory_used_mib", 0)
                use["process_count"] = mine.get("process_count", 0)
            elif a.whole_card and card is not None:
                use["memory_used_mib"] = card.values.get("memory_used_mib")
        out[a.pk] = use
    return out


def _pct(part: float | None, whole: float) -> float | None:
    if part is None or whole <= 0:
        return None
    return round(min(part / whole * 100, 100.0), 1)


def use_row(use: dict[str, Any]) -> dict[str, Any]:
    """``live_use``'s entry with the page's derived numbers (also what the socket pushes)."""
    return {
        **use,
        "memory_used_pct": _pct(use["memory_used_mib"], use["memory_mib"]),
        "over_memory": use["memory_used_mib"] is not None
        and use["memory_used_mib"] > use["memory_mib"],
    }


def my_vgpus(user: User) -> list[dict[str, Any]]:
    allocations = list(my_allocations(user))
    use = live_use(allocations)
    rows = []
    for a in allocations:
        req = getattr(a.lease, "gpu_request", None)
        rows.append({
            "allocation": a, "request": req, "use": use_row(use[a.pk]),
            "launch_url": reverse("pools:allocation_detail", args=[a.pk]),
        })  # fmt: skip
    return rows


# --- my requests ------------------------------------------------------------------------


def my_requests(user: User, limit: int = RECENT_REQUESTS) -> list[dict[str, Any]]:
    """The user's own requests, open ones first, then the newest; each with its place in
    its pool's queue when approved and waiting."""
    open_first = Case(When(state__in=OPEN_STATES, then=Value(0)), default=Value(1),
                      output_field=IntegerField())  # fmt: skip
    rows = (
        visible_requests(user)
        .filter(requester_id=user.pk)
        .annotate(open_first=open_first)
        .order_by("open_first", "-created")[:limit]
    )
    return [{"req": r, "position": queue_position(r)} for r in rows]


# --- my tenants' quotas -----------------------------------------------------------------


@dataclass
class QuotaLeft:
    """One quota of one of my tenants: what it leaves the tenant, and me within it."""

    tenant: Any
    pool: Any
    vgpus: int
    compute_pct: int
    memory_mib: int
    gpu_hours: Decimal | None  # None: the quota sets no GPU-hour budget
    mine: dict[str, int | None] = field(default_factory=dict)  # my caps left (None: none)


def quota_left(user: User) -> list[QuotaLeft]:
    """Each quota of the user's tenants with what is left under its limits (never below
    0), and what the member caps leave the user; the tenancy's one accounting."""
    if not user.is_authenticated:
        return []
    out = []
    tenant_ids = list(tenant_ids_of(user).values_list("tenant_id", flat=True))
    for usage in quota_usage(tenant_ids, members=True):
        q, used = usage.quota, usage.used
        me = usage.members.get(user.pk)
        caps = {
            "vgpus": (q.user_limit_vgpus, me.vgpus if me else 0),
            "compute_pct": (q.user_limit_compute_pct, me.compute_pct if me else 0),
            "memory_mib": (q.user_limit_memory_mib, me.memory_mib if me else 0),
        }
        out.append(
            QuotaLeft(
                tenant=q.tenant,
                pool=q.pool,
                vgpus=max(q.limit_vgpus - used.vgpus, 0),
                compute_pct=max(q.limit_compute_pct - used.compute_pct, 0),
                memory_mib=max(q.limit_memory_mib - used.memory_mib, 0),
                gpu_hours=max(Decimal(q.limit_gpu_hours) - used.gpu_hours, Decimal(0))
                if q.limit_gpu_hours
                else None,
                mine={k: None if c is None else max(c - held, 0) for k, (c, held) in caps.items()},
            )
        )
    return out
