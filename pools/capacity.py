"""A pool's capacity as its page and its live push show it.

Four numbers per pool and per card: physical (100 % and the card's memory), capacity with
the pool's ratios, allocated (the card rows' counters, kept by the allocation service),
and actually used (the latest readings, through ``telemetry.interface``). Fragmentation
is the largest slice that still fits on one card; the risk list names cards whose memory
in use approaches their physical memory while they hold slices (oversubscribed memory
runs out there first).

Two parts, because they change at different rates: ``picture`` (cards and slices: changes
when something is placed, released or edited; owner labels as the viewer may see them)
and ``usage`` (readings: changes every poll cycle; the same for every viewer).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse

from agents.choices import GpuHealth, NodeState
from pools.choices import AllocationState
from pools.models import Allocation, Pool, PoolCard
from pools.permissions import visible_leases
from telemetry import interface as telemetry

# Memory in use at or above this share of a card's physical memory is a risk.
DEFAULT_MEMORY_RISK_RATIO = 0.9


def risk_ratio() -> float:
    return float(getattr(settings, "POOLS_MEMORY_RISK_RATIO", DEFAULT_MEMORY_RISK_RATIO))


def _cards(pool: Pool) -> list[dict[str, Any]]:
    rows = PoolCard.objects.filter(pool=pool).order_by("gpu__node__name", "gpu__index")
    out = []
    for row in rows.values(
        "gpu_id", "gpu__uuid", "gpu__index", "gpu__model", "gpu__vendor", "gpu__memory_total_mib",
        "gpu__health", "gpu__node_id", "gpu__node__name", "gpu__node__state", "compute_capacity",
        "memory_capacity_mib", "compute_allocated", "memory_allocated_mib", "slices",
        "held_whole", "cordoned_at", "added_by_hand",
    ):  # fmt: skip
        schedulable = (
            row["cordoned_at"] is None
            and row["gpu__health"] == GpuHealth.OK
            and row["gpu__node__state"] == NodeState.ONLINE
        )
        out.append({
            "id": row["gpu_id"], "uuid": row["gpu__uuid"], "index": row["gpu__index"],
            "model": row["gpu__model"], "vendor": row["gpu__vendor"],
            "node_id": row["gpu__node_id"],
            "node": row["gpu__node__name"], "health": row["gpu__health"],
            "node_state": row["gpu__node__state"], "schedulable": schedulable,
            "cordoned": row["cordoned_at"] is not None, "added_by_hand": row["added_by_hand"],
            "memory_physical_mib": row["gpu__memory_total_mib"],
            "compute_capacity": row["compute_capacity"],
            "memory_capacity_mib": row["memory_capacity_mib"],
            "compute_allocated": row["compute_allocated"],
            "memory_allocated_mib": row["memory_allocated_mib"],
            "slice_count": row["slices"], "held_whole": row["held_whole"], "slices": [],
        })  # fmt: skip
    return out


def _slices(pool: Pool, user, cards: dict[int, dict]) -> list[dict[str, Any]]:
    """Slices on the pool's cards; the owner and link only where ``user`` sees the lease.
    Returns the slices whose card is no longer in the pool (stranded)."""
    allocations = Allocation.objects.filter(pool=pool).exclude(state=AllocationState.RELEASED)
    visible = set(
        allocations.filter(lease__in=visible_leases(user).values("pk")).values_list("pk", flat=True)
    )
    elsewhere = []
    for a in allocations.select_related("lease__holder").order_by("pk"):
        shown = a.pk in visible
        item = {
            "id": a.pk, "compute_pct": a.compute_pct, "memory_mib": a.memory_mib,
            "whole_card": a.whole_card, "state": a.state, "agent_sync": a.agent_sync,
            "owner": _owner(a) if shown else None,
            "url": reverse("pools:allocation_detail", args=[a.pk]) if shown else None,
        }  # fmt: skip
        if a.gpu_id in cards:
            cards[a.gpu_id]["slices"].append(item)
        else:
            elsewhere.append(item)
    return elsewhere


def _owner(allocation: Allocation) -> str:
    lease = allocation.lease
    holder = lease.holder.get_username()
    return f"{holder} · {lease.label}" if lease.label else holder


def fragmentation(cards: list[dict[str, Any]]) -> dict[str, int]:
    """The largest slice that still fits: the most compute and the most memory free on any
    one schedulable card (a slice is never more than one physical card), and the cards
    with nothing on them."""
    open_cards = [c for c in cards if c["schedulable"] and not c["held_whole"]]
    return {
        "max_free_compute_pct": max(
            (min(100, c["compute_capacity"] - c["compute_allocated"]) for c in open_cards),
            default=0,
        ),
        "max_free_memory_mib": max(
            (
                min(c["memory_physical_mib"], c["memory_capacity_mib"] - c["memory_allocated_mib"])
                for c in open_cards
            ),
            default=0,
        ),
        "free_cards": sum(1 for c in open_cards if c["slice_count"] == 0),
        "schedulable_cards": len(open_cards),
    }


def totals(cards: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "cards": len(cards),
        "compute_physical_pct": 100 * len(cards),
        "memory_physical_mib": sum(c["memory_physical_mib"] for c in cards),
        "compute_capacity_pct": sum(c["compute_capacity"] for c in cards),
        "memory_capacity_mib": sum(c["memory_capacity_mib"] for c in cards),
        "compute_allocated_pct": sum(c["compute_allocated"] for c in cards),
        "memory_allocated_mib": sum(c["memory_allocated_mib"] for c in cards),
        "slices": sum(c["slice_count"] for c in cards),
    }


def picture(pool: Pool, user) -> dict[str, Any]:
    """Cards, slices, totals and fragmentation, as ``user`` may see them."""
    cards = _cards(pool)
    stranded = _slices(pool, user, {c["id"]: c for c in cards})
    return {
        "pool": {
            "id": pool.pk,
            "name": pool.name,
            "slug": pool.slug,
            "policy": pool.policy,
            "compute_ratio": str(pool.compute_ratio),
            "memory_ratio": str(pool.memory_ratio),
        },
        "totals": totals(cards),
        "fragmentation": fragmentation(cards),
        "cards": cards,
        "stranded": stranded,
    }


def usage(pool_id: int) -> dict[str, Any]:
    """What the pool's cards actually use now, from the latest readings; the same for every
    viewer. A card without a fresh reading has no values (never zeros)."""
    rows = list(
        PoolCard.objects.filter(pool_id=pool_id).values_list(
            "gpu_id", "gpu__uuid", "gpu__node_id", "gpu__memory_total_mib", "slices",
            "memory_allocated_mib",
        )
    )  # fmt: skip
    latest = telemetry.latest({row[2] for row in rows})
    ratio = risk_ratio()
    cards: dict[str, dict[str, Any]] = {}
    at_risk: list[int] = []
    utils: list[float] = []
    memory_used, memory_reported = 0, 0
    for gpu_id, uuid, node_id, physical, slices, memory_allocated in rows:
        reading = latest.get(node_id)
        card = reading.cards.get(uuid) if reading else None
        values = card.values if card else {}
        util, used = values.get("utilization_gpu_pct"), values.get("memory_used_mib")
        risky = bool(slices and used is not None and physical and used >= ratio * physical)
        cards[str(gpu_id)] = {
            "utilization_gpu_pct": util,
            "memory_used_mib": used,
            "at_risk": risky,
            "memory_oversubscribed": memory_allocated > physical,
        }
        if util is not None:
            utils.append(util)
        if used is not None:
            memory_used, memory_reported = memory_used + used, memory_reported + 1
        if risky:
            at_risk.append(gpu_id)
    return {
        "cards": cards,
        "utilization_avg_pct": round(sum(utils) / len(utils), 1) if utils else None,
        "memory_used_mib": memory_used if memory_reported else None,
        "reporting_cards": len(utils),
        "at_risk": at_risk,
        "risk_ratio": ratio,
        "risk_pct": round(ratio * 100),
    }
