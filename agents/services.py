"""Fleet services: turn poll results into inventory, latest readings and live pushes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agents import poller, readings
from agents.choices import ADMIN_STATES, GpuHealth, NodeSource, NodeState
from agents.models import GPU, Node

logger = logging.getLogger(__name__)

FLEET_GROUP = "fleet"

_NODE_FIELDS = [
    "hostname",
    "state",
    "missed_polls",
    "last_seen",
    "last_error",
    "agent_version",
    "driver_version",
    "cuda_version",
    "updated",
]
_GPU_FIELDS = [
    "node",
    "index",
    "model",
    "memory_total_mib",
    "pci_bus_id",
    "serial",
    "health",
    "last_seen",
    "updated",
]


@dataclass
class PollSummary:
    polled: int = 0
    answered: int = 0
    failed: dict[int, str] = field(default_factory=dict)
    gpus_seen: int = 0
    gpus_created: int = 0


def agent_targets() -> list[poller.AgentTarget]:
    nodes = Node.objects.filter(source=NodeSource.AGENT).exclude(agent_url="")
    return [
        poller.AgentTarget(node_id=pk, url=url, token=token)
        for pk, url, token in nodes.values_list("pk", "agent_url", "agent_token")
    ]


def poll_fleet() -> PollSummary:
    """One poll cycle: read every agent, record what they said, push it live."""
    targets = agent_targets()
    results = poller.poll(
        targets,
        timeout=settings.GPU_POLL_TIMEOUT,
        concurrency=settings.GPU_POLL_CONCURRENCY,
    )
    return record_poll_results(results)


def _apply_snapshot(node: Node, snapshot: dict, now: datetime) -> None:
    node.hostname = str(snapshot.get("hostname") or node.hostname)[:255]
    node.agent_version = str((snapshot.get("agent") or {}).get("version") or "")[:64]
    node.driver_version = str(snapshot.get("driver_version") or "")[:64]
    node.cuda_version = str(snapshot.get("cuda_version") or "")[:32]
    node.last_seen = now
    node.last_error = ""
    node.missed_polls = 0
    if node.state not in ADMIN_STATES:
        node.state = NodeState.ONLINE


def _apply_failure(node: Node, error: str) -> None:
    node.missed_polls += 1
    node.last_error = error[:1000]
    if node.state == NodeState.ONLINE and node.missed_polls >= settings.NODE_OFFLINE_AFTER_MISSES:
        node.state = NodeState.OFFLINE
        logger.warning(
            "node %s is offline after %d missed polls: %s", node.name, node.missed_polls, error
        )


def _upsert_gpus(
    answered: dict[int, dict], nodes: dict[int, Node], now: datetime
) -> tuple[int, int]:
    """Create or update the cards the agents reported; cards that vanished are lost."""
    reported = {
        gpu["uuid"]: (node_id, gpu)
        for node_id, snapshot in answered.items()
        for gpu in snapshot["gpus"]
    }
    existing = {g.uuid: g for g in GPU.objects.select_for_update().filter(uuid__in=reported)}
    to_create, to_update = [], []
    for uuid, (node_id, data) in reported.items():
        gpu = existing.get(uuid) or GPU(uuid=uuid)
        gpu.node = nodes[node_id]
        gpu.index = data["index"]
        gpu.model = str(data.get("name") or gpu.model or "unknown")[:128]
        gpu.memory_total_mib = int(data.get("memory_total_mib") or gpu.memory_total_mib or 0)
        gpu.pci_bus_id = str(data.get("pci_bus_id") or gpu.pci_bus_id)[:32]
        gpu.serial = str(data.get("serial") or gpu.serial)[:64]
        gpu.health = GpuHealth.LOST if data.get("health") == "lost" else GpuHealth.OK
        gpu.last_seen = now
        gpu.updated = now
        (to_update if gpu.pk else to_create).append(gpu)
    GPU.objects.bulk_create(to_create)
    GPU.objects.bulk_update(to_update, _GPU_FIELDS)
    # A card its own agent no longer lists has fallen off the bus: keep it, marked lost.
    GPU.objects.filter(node_id__in=answered).exclude(uuid__in=reported).exclude(
        health=GpuHealth.LOST
    ).update(health=GpuHealth.LOST, updated=now)
    return len(reported), len(to_create)


def record_poll_results(
    results: list[poller.PollResult], *, now: datetime | None = None
) -> PollSummary:
    """Record one cycle's answers and failures, then publish the changed nodes."""
    now = now or timezone.now()
    summary = PollSummary(polled=len(results))
    if not results:
        return summary
    with transaction.atomic():
        nodes = Node.objects.select_for_update().in_bulk([r.node_id for r in results])
        answered: dict[int, dict] = {}
        for result in results:
            node = nodes.get(result.node_id)
            if node is None:  # deleted while we were polling
                continue
            if result.ok:
                _apply_snapshot(node, result.snapshot, now)
                answered[node.pk] = result.snapshot
            else:
                _apply_failure(node, result.error)
                summary.failed[node.pk] = result.error
            node.updated = now
        Node.objects.bulk_update(nodes.values(), _NODE_FIELDS)
        summary.answered = len(answered)
        summary.gpus_seen, summary.gpus_created = _upsert_gpus(answered, nodes, now)
        readings.store_latest(answered)
        node_ids = list(nodes)
        transaction.on_commit(lambda: publish_fleet_update(node_ids))
    return summary


def publish_fleet_update(node_ids: list[int]) -> None:
    """Push the given nodes to every dashboard; called after commit, never before."""
    payload = readings.fleet_payload(node_ids)
    layer = get_channel_layer()
    if layer is None or not payload:
        return
    async_to_sync(layer.group_send)(FLEET_GROUP, {"type": "fleet.update", "nodes": payload})
