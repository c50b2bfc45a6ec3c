"""Celery beat's schedule, run inside the web server's event loop.

The embedded default has no broker and no separate worker: the in-memory
channel layer only reaches consumers of the same process, so periodic tasks
must run there too. Each task runs in a worker thread (``sync_to_async``), and
what it publishes with ``async_to_sync`` travels back through the server's own
loop to the websocket consumers. Production runs ``celery worker`` and
``celery beat`` instead; the schedule (``settings.CELERY_BEAT_SCHEDULE``) and the
tasks are the same, and so are the schedule objects: when an entry is due is
Celery's own answer (``is_due``), for fixed intervals and crontabs alike.
"""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import schedule as interval
from django.db import close_old_connections

logger = logging.getLogger(__name__)

# As Celery beat does (its max_interval): look at the wall clock at least this often, so
# a clock that jumped (NTP, a suspended machine) cannot hold an entry back for a day.
MAX_SLEEP_S = 300.0


def entries(app: Celery, schedule: dict) -> dict[str, ScheduleEntry]:
    """``schedule``'s entries built as beat builds them (its ``merge_inplace``)."""
    return {
        name: ScheduleEntry(**dict(entry, name=name, app=app)) for name, entry in schedule.items()
    }


def _run_task(app: Celery, entry: ScheduleEntry) -> None:
    close_old_connections()
    try:
        app.tasks[entry.task].apply(args=entry.args, kwargs=entry.kwargs, throw=True)
    except Exception:
        logger.exception("embedded run of %s failed", entry.task)
    finally:
        close_old_connections()


async def _run_entry(app: Celery, entry: ScheduleEntry) -> None:
    run = sync_to_async(_run_task, thread_sensitive=False)
    when = entry.schedule
    # A fixed interval runs at once (the demo's first poll need not wait); a crontab
    # (the 08:00 digest) waits for its time, as in beat.
    last_run = None if isinstance(when, interval) else when.now()
    while True:
        if last_run is not None:
            due, wait = when.is_due(last_run)
            if not due:
                await asyncio.sleep(min(max(wait, 0.0), MAX_SLEEP_S))
                continue
        # The start of the run is its time: a fixed rate, a slow run shortens the pause.
        last_run = when.now()
        await run(app, entry)


def start(app: Celery, schedule: dict, loop: asyncio.AbstractEventLoop) -> list[asyncio.Task]:
    """Start one looping task per beat entry on ``loop``, each named after its entry;
    returns them for cancelling. A task name the app does not know fails here, at start."""
    app.loader.import_default_modules()
    built = entries(app, schedule)
    unknown = sorted(entry.task for entry in built.values() if entry.task not in app.tasks)
    if unknown:
        raise ValueError(f"beat schedule names unknown tasks: {', '.join(unknown)}")
    tasks = []
    for name, entry in built.items():
        tasks.append(loop.create_task(_run_entry(app, entry), name=name))
        logger.info("embedded scheduler: %s %s", entry.task, entry.schedule)
    return tasks


async def stop(tasks: list[asyncio.Task], timeout: float = 30.0) -> None:
    """Cancel the entries' loops and let the runs in flight end, while the event loop still
    runs: a run's thread may be waiting on it (``async_to_sync`` of a Channels publish),
    and a thread left waiting on a stopped loop keeps the process from exiting. The runs'
    threads are the loop's default executor's (``sync_to_async`` not thread-sensitive)."""
    for task in tasks:
        task.cancel()
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.shutdown_default_executor(), timeout)
    except TimeoutError:
        logger.warning("embedded scheduler: runs still in flight after %g s", timeout)
