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
