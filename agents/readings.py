"""Latest readings per node, kept in the cache (Redis in production).

The database holds inventory (what exists, its health, when it was last seen);
the cache holds what the cards read a moment ago. The dashboard and its
websocket are built from both through ``fleet_payload``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.cache import cache

from agents.models import GPU, Node

# Readings older than this are worthless for a live view; the key expires.
LATEST_TTL_S = 600

# Reading fields the browser shows, copied from the agent's snapshot as they are.
LIVE_GPU_FIELDS = (
    "utilization_gpu_pct",
    "utilization_memory_pct",
    "memory_used_mib",
    "temperature_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
)


def _key(node_id: int) -> str:
    return f"fleet:latest:{node_id}"


def store_latest(snapshots: dict[int, dict[str, Any]]) -> None:
    """Keep the newest snapshot of each node, reduced to what the live view needs."""
    reduced = {}
    for node_id, snapshot in snapshots.items():
        reduced[_key(node_id)] = {
            "collected_at": snapshot.get("collected_at"),
            "gpus": {
                gpu["uuid"]: {f: gpu[f] for f in LIVE_GPU_FIELDS if f in gpu}
                for gpu in snapshot["gpus"]
            },
        }
    cache.set_many(reduced, timeout=LATEST_TTL_S)


def latest_for(node_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    node_ids = list(node_ids)
    found = cache.get_many([_key(i) for i in node_ids])
    return {i: found[_key(i)] for i in node_ids if _key(i) in found}


def node_payload(node: Node, gpus: Iterable[GPU], latest: dict[str, Any] | None) -> dict:
    """One node as the dashboard draws it: inventory plus its latest readings."""
    readings = (latest or {}).get("gpus", {})
    return {
        "id": node.pk,
        "name": node.name,
        "hostname": node.hostname,
        "state": node.state,
        "last_seen": node.last_seen.isoformat() if node.last_seen else None,
        "last_error": node.last_error,
        "collected_at": (latest or {}).get("collected_at"),
        "gpus": [
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "model": gpu.model,
                "memory_total_mib": gpu.memory_total_mib,
                "health": gpu.health,
                **readings.get(gpu.uuid, {}),
            }
            for gpu in gpus
        ],
    }


def fleet_payload(node_ids: Iterable[int] | None = None) -> list[dict]:
    """Nodes (all, or the given ones) with their GPUs and latest readings."""
    nodes = Node.objects.prefetch_related("gpus").order_by("name")
    if node_ids is not None:
        nodes = nodes.filter(pk__in=list(node_ids))
    nodes = list(nodes)
    latest = latest_for(n.pk for n in nodes)
    return [node_payload(n, n.gpus.all(), latest.get(n.pk)) for n in nodes]
