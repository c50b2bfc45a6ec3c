from __future__ import annotations

import logging
from dataclasses import asdict

from celery import group, shared_task
from django.conf import settings
from django.utils import timezone

from telemetry import rollups, services

logger = logging.getLogger(__name__)


# Late acks (acks_late, reject_on_worker_lost) on every task here: a worker lost mid-task
# leaves the message to run again. Safe because each one only refreshes state: a poll
# re-reads the agents (readings are keyed by time), a flush merges each claimed minute
# once (its claim row), a prune deletes what is old either way.


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=False)
def poll_agents() -> dict:
    """Poll every registered agent once, in chunks spread over the workers.

    Small fleets are polled in this task; a fleet larger than one chunk is split
    so that several workers share the cycle. Idempotent: a repeat only refreshes.
    """
    node_ids = list(services.nodes_due().order_by("pk").values_list("pk", flat=True))
    size = settings.GPU_POLL_CHUNK
    if len(node_ids) <= size:
        return asdict(services.poll_fleet(node_ids))
    chunks = [node_ids[i : i + size] for i in range(0, len(node_ids), size)]
    group(poll_agent_chunk.s(chunk) for chunk in chunks).apply_async(
        expires=settings.GPU_POLL_INTERVAL
    )
    return {"polled": len(node_ids), "chunks": len(chunks)}


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def poll_agent_chunk(node_ids: list[int]) -> dict:
    summary = services.poll_fleet(node_ids)
    if summary.failed:
        logger.info("poll chunk: %d/%d agents answered", summary.answered, summary.polled)
    return asdict(summary)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def flush_rollups() -> int:
    """Write the finished minutes of the sample buffer as 1-minute and 1-hour rollups."""
    return rollups.flush(timezone.now())


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def prune_rollups() -> dict:
    return rollups.prune(timezone.now())


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=False)
def poll_prometheus() -> dict:
    """Read the dcgm-exporter series in Prometheus once; never raises for Prometheus itself."""
    # Imported here: prometheus-api-client is only loaded where a Prometheus is configured.
    from telemetry import prometheus_source

    summary = prometheus_source.poll_prometheus()
    if summary.failed:
        logger.info("prometheus poll: %d/%d nodes answered", summary.answered, summary.polled)
    return asdict(summary)
