"""Celery beat's schedule, run inside the web server's event loop.

The embedded default has no broker and no separate worker: the in-memory
channel layer only reaches consumers of the same process, so periodic tasks
must run there too. Each task runs in a worker thread (``sync_to_async``), and
what it publishes with ``async_to_sync`` travels back through the server's own
loop to the websocket consumers. Production runs ``celery worker`` and
``celery beat`` instead; the tasks are the same.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

from asgiref.sync import sync_to_async
from celery import Celery
from django.db import close_old_connections

logger = logging.getLogger(__name__)


def _period_seconds(schedule: object) -> float:
    if isinstance(schedule, timedelta):
        return schedule.total_seconds()
    if isinstance(schedule, int | float):
        return float(schedule)
    run_every = getattr(schedule, "run_every", None)  # celery.schedules.schedule
    if isinstance(run_every, timedelta):
        return run_every.total_seconds()
    raise ValueError(f"embedded scheduler supports fixed intervals only, not {schedule!r}")


def _run_task(app: Celery, name: str) -> None:
    close_old_connections()
    try:
        app.tasks[name].apply(throw=True)
    except Exception:
        logger.exception("embedded run of %s failed", name)
    finally:
        close_old_connections()


async def _every(app: Celery, name: str, period: float) -> None:
    run = sync_to_async(_run_task, thread_sensitive=False)
    while True:
        started = time.monotonic()
        await run(app, name)
        # Fixed rate, not fixed delay: a slow run shortens the pause after it.
        await asyncio.sleep(max(0.0, period - (time.monotonic() - started)))


def start(app: Celery, schedule: dict, loop: asyncio.AbstractEventLoop) -> list[asyncio.Task]:
    """Start one looping task per beat entry on ``loop``; returns them for cancelling."""
    app.loader.import_default_modules()
    tasks = []
    for entry in schedule.values():
        period = _period_seconds(entry["schedule"])
        tasks.append(loop.create_task(_every(app, entry["task"], period)))
        logger.info("embedded scheduler: %s every %g s", entry["task"], period)
    return tasks
