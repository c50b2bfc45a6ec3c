from __future__ import annotations

import logging
from dataclasses import asdict

from celery import shared_task

from agents import services

logger = logging.getLogger(__name__)


@shared_task(ignore_result=False)
def poll_agents() -> dict:
    """Poll every registered agent once. Idempotent: a repeat only refreshes readings."""
    summary = services.poll_fleet()
    if summary.failed:
        logger.info("poll: %d/%d agents answered", summary.answered, summary.polled)
    return asdict(summary)


@shared_task(ignore_result=False)
def poll_prometheus() -> dict:
    """Read the dcgm-exporter series in Prometheus once; never raises for Prometheus itself."""
    # Imported here: prometheus-api-client is only loaded where a Prometheus is configured.
    from agents import prometheus_source

    summary = prometheus_source.poll_prometheus()
    if summary.failed:
        logger.info("prometheus poll: %d/%d nodes answered", summary.answered, summary.polled)
    return asdict(summary)
