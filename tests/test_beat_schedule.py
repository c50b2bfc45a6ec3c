"""One beat schedule: what `celery beat` runs is what the embedded scheduler (the demo)
runs, crontab entries included (an operator's own), and the requests' and reports'
periods come from the environment."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from celery.beat import ScheduleEntry, Scheduler
from celery.schedules import crontab
from celery.signals import task_prerun
from django.conf import settings

from portal import celery_app, embedded
from reports.interface import idle_digest
from tests import procs

EVERY_ENTRY = {
    "poll-agents", "flush-rollups", "prune-rollups", "pools-reconcile",
    "requeue-alert-deliveries", "alerts-business-rules", "place-queued-requests",
    "sweep-requests", "scan-idle", "take-back-borrowed", "account-days", "idle-digest",
    "prune-idempotency-keys", "sync-clusters", "gate-cluster-workloads",
}  # fmt: skip


def _described(entries: dict[str, ScheduleEntry]) -> dict[str, tuple]:
    return {
        name: (e.task, e.schedule, tuple(e.args), e.kwargs, e.options)
        for name, e in entries.items()
    }


def test_beat_and_the_embedded_scheduler_run_the_same_entries():
    # What `celery beat` runs: the app's beat_schedule, loaded by beat's own scheduler.
    beat = Scheduler(app=celery_app).schedule
    expected = EVERY_ENTRY | ({"poll-prometheus"} if settings.PROMETHEUS_URL else set())
    assert set(beat) == expected
    # What the demo hands the embedded scheduler (manage.py demo).
    ours = embedded.entries(celery_app, settings.CELERY_BEAT_SCHEDULE)
    assert _described(ours) == _described(beat)
    celery_app.loader.import_default_modules()
    assert {e.task for e in beat.values()} <= set(celery_app.tasks)

    loop, started = asyncio.new_event_loop(), []
    try:
        started = embedded.start(celery_app, settings.CELERY_BEAT_SCHEDULE, loop)
        assert sorted(task.get_name() for task in started) == sorted(expected)
    finally:
        for task in started:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*started, return_exceptions=True))
        loop.close()


def test_an_unknown_task_is_refused_at_start_and_nothing_runs():
    loop = asyncio.new_event_loop()
    try:
        schedule = {
            "fine": {"task": "reports.tasks.send_idle_digest", "schedule": 5.0},
            "typo": {"task": "reports.tasks.send_idle_digets", "schedule": 5.0},
        }
        with pytest.raises(ValueError, match="send_idle_digets"):
            embedded.start(celery_app, schedule, loop)
        assert not asyncio.all_tasks(loop)
    finally:
        loop.close()


def _run_until(schedule: dict, done: Callable[[], bool], timeout: float) -> None:
    """Run ``schedule`` in the embedded scheduler until ``done()`` or ``timeout`` seconds."""

    async def main() -> None:
        started = embedded.start(celery_app, schedule, asyncio.get_running_loop())
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for task in started:
            task.cancel()
        await asyncio.gather(*started, return_exceptions=True)

    asyncio.run(main())


@pytest.fixture
def digests():
    """The clock's reading each time the daily idle digest was sent."""
    heard: list[datetime] = []
    yield heard
    idle_digest.disconnect(dispatch_uid="test-beat-schedule")


@pytest.mark.django_db(transaction=True)
def test_the_embedded_scheduler_runs_a_crontab_entry_at_its_time(digests, settings):
    # A clock that reads 07:59:57 in the portal's time zone now and runs in real time:
    # an 08:00 crontab entry is 3 s away. (The digest itself is checked on an interval;
    # crontab entries an operator adds must still run at their time.)
    settings.IDLE_DIGEST_HOUR = 0  # the digest is due whatever the hour the test runs
    # The tasks' modules imported first: on a loaded machine that alone can take the 3 s,
    # and an entry started after 08:00 waits for tomorrow's.
    celery_app.loader.import_default_modules()
    eight = celery_app.now().replace(hour=8, minute=0, second=0, microsecond=0)
    base, t0 = eight - timedelta(seconds=3), time.monotonic()

    def clock() -> datetime:
        return base + timedelta(seconds=time.monotonic() - t0)

    entry = {
        "task": "reports.tasks.send_idle_digest",
        "schedule": crontab(hour=8, minute=0, nowfun=clock),
    }
    idle_digest.connect(
        lambda sender, **kw: digests.append(clock()), weak=False, dispatch_uid="test-beat-schedule"
    )
    _run_until({"idle-digest": entry}, lambda: bool(digests), timeout=10)
    assert len(digests) == 1, "the digest was not sent within 10 s of its time"
    assert eight <= digests[0] < eight + timedelta(seconds=5)


@pytest.mark.django_db(transaction=True)
def test_an_interval_entry_runs_at_start_then_every_period():
    # Each run of the task, sent or not (the digest itself goes once a day).
    t0, runs = time.monotonic(), []

    def started(sender=None, **kwargs) -> None:
        if sender is not None and sender.name == "reports.tasks.send_idle_digest":
            runs.append(time.monotonic() - t0)

    task_prerun.connect(started, weak=False, dispatch_uid="test-beat-schedule")
    schedule = {"digest": {"task": "reports.tasks.send_idle_digest", "schedule": 1.0}}
    try:
        _run_until(schedule, lambda: len(runs) >= 2, timeout=10)
    finally:
        task_prerun.disconnect(dispatch_uid="test-beat-schedule")
    assert len(runs) >= 2
    first, second = runs[:2]
    assert first < 0.9  # at once, not after a period
    assert 0.9 <= second - first < 3


PROBE = """
import json, django
django.setup()
from celery.beat import Scheduler
from portal import celery_app
beat = Scheduler(app=celery_app).schedule
print(json.dumps({
    name: [e.schedule.run_every.total_seconds(), e.options.get("expires")]
    for name, e in beat.items() if hasattr(e.schedule, "run_every")
}))
"""

KNOBS = {
    "REQUESTS_PLACE_EVERY_S": "place-queued-requests",
    "REQUESTS_SWEEP_EVERY_S": "sweep-requests",
    "IDLE_SCAN_EVERY_S": "scan-idle",
    "TAKEBACK_EVERY_S": "take-back-borrowed",
    "ACCOUNTING_EVERY_S": "account-days",
}


def _beat_in_child(**knobs: str | None) -> subprocess.CompletedProcess:
    env = procs.child_env(DJANGO_SETTINGS_MODULE="portal.settings", **knobs)
    return subprocess.run(
        [procs.PYTHON, "-c", PROBE], cwd=procs.REPO, env=env, capture_output=True,
        text=True, timeout=60, check=False,
    )  # fmt: skip


def test_the_knobs_set_the_periods_and_expiries():
    defaults = _beat_in_child(**dict.fromkeys(KNOBS))
    assert defaults.returncode == 0, defaults.stderr
    periods = json.loads(defaults.stdout)
    assert {entry: periods[entry] for entry in KNOBS.values()} == {
        "place-queued-requests": [15, 15],
        "sweep-requests": [60, 60],
        "scan-idle": [300, 300],
        "take-back-borrowed": [60, 60],
        "account-days": [900, 900],
    }
    values = {knob: str(7 + 2 * i) for i, knob in enumerate(KNOBS)}
    tuned = _beat_in_child(**values)
    assert tuned.returncode == 0, tuned.stderr
    periods = json.loads(tuned.stdout)
    for knob, entry in KNOBS.items():
        assert periods[entry] == [int(values[knob])] * 2, knob


@pytest.mark.parametrize("raw", ["0", "soon"])
def test_a_bad_period_stops_the_start_with_the_knobs_name(raw):
    result = _beat_in_child(IDLE_SCAN_EVERY_S=raw)
    assert result.returncode != 0
    assert "IDLE_SCAN_EVERY_S must be" in result.stderr
