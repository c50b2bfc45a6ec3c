"""Celery under the faults an enterprise sees, on real processes: a private redis-server
killed and started again empty under a real worker (the worker reconnects and runs what
is sent next), and a worker SIGKILLed mid-task (late acks: the next worker runs it again).
Also: the three queues and which tasks go where. docs/reliability.md lists these."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from alerts.choices import DeliveryStatus
from alerts.models import Delivery
from portal.celery import app as celery_app
from tests import procs
from tests.alert_receivers import Receiver, handler_for
from tests.celery_probe import slow
from tests.test_alert_delivery import channel, fire_to, wait_until, worker_env  # noqa: F401

REDIS_SERVER = os.environ.get("REDIS_SERVER_PATH", "/usr/bin/redis-server")


def _redis_server() -> str:
    path = shutil.which(REDIS_SERVER) or shutil.which("redis-server")
    if path:
        return path
    message = f"redis-server not found at {REDIS_SERVER} (Debian's redis-server package)"
    procs.unavailable(message)


class PrivateRedis:
    """A redis-server of the test's own, keeping nothing across a restart (as compose's)."""

    def __init__(self, binary: str) -> None:
        self.binary, self.port, self.proc = binary, procs.free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = procs.start(
            "redis-server",
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("redis-server did not listen:\n" + "".join(self.proc.lines))

    def kill(self) -> None:
        self.proc.popen.send_signal(signal.SIGKILL)
        self.proc.popen.wait()


@pytest.fixture
def redis_server() -> Iterator[PrivateRedis]:
    server = PrivateRedis(_redis_server())
    server.start()
    yield server
    if server.proc.popen.poll() is None:
        server.kill()


@pytest.fixture
def env_for(child_env_for_test_db):
    def env(server: PrivateRedis, **more: str) -> dict[str, str]:
        return {**child_env_for_test_db, "REDIS_URL": server.url, **more}

    return env


def send(server: PrivateRedis, notes: Path, tag: str, seconds: float) -> None:
    with celery_app.connection_for_write(server.url) as conn:
        slow.apply_async((str(notes), tag, seconds), connection=conn, retry=False)


def lines(notes: Path) -> list[str]:
    return notes.read_text().splitlines() if notes.exists() else []


def wait_for_line(notes: Path, prefix: str, timeout: float, count: int = 1) -> float:
    start = time.monotonic()
    while sum(line.startswith(prefix) for line in lines(notes)) < count:
        assert time.monotonic() - start < timeout, f"{prefix!r} x{count} not in {lines(notes)}"
        time.sleep(0.05)
    return time.monotonic() - start


# --- the queues ---------------------------------------------------------------------------


def _queue_of(task: str) -> str:
    return celery_app.amqp.router.route({}, task)["queue"].name


def test_deliveries_polls_and_the_rest_go_to_their_own_queues():
    celery_app.loader.import_default_modules()
    assert _queue_of("alerts.tasks.deliver") == "deliveries"
    assert _queue_of("alerts.tasks.requeue_deliveries") == "deliveries"
    assert _queue_of("quotas.tasks.send_notices") == "deliveries"
    for task in ("telemetry.tasks.poll_agents", "telemetry.tasks.poll_agent_chunk",
                 "telemetry.tasks.poll_prometheus", "telemetry.tasks.flush_rollups",
                 "pools.tasks.sync_desired_state", "pools.tasks.after_poll_cycle"):  # fmt: skip
        assert _queue_of(task) == "polls", task
    for task in ("reports.tasks.send_idle_digest", "reports.tasks.scan_and_reclaim",
                 "quotas.tasks.sweep_requests", "alerts.tasks.evaluate_business",
                 "portal.tasks.prune_idempotency_keys", "pools.tasks.reconcile_pools"):  # fmt: skip
        assert _queue_of(task) == "celery", task
    # A worker without -Q consumes every queue a task can be routed to.
    assert set(celery_app.amqp.queues) == {"deliveries", "polls", "celery"}


def test_every_portal_task_acknowledges_late():
    celery_app.loader.import_default_modules()
    ours = [t for name, t in celery_app.tasks.items() if not name.startswith("celery.")]
    assert len(ours) >= 18
    for task in ours:
        assert task.acks_late and task.reject_on_worker_lost, task.name


def test_the_visibility_timeout_outlasts_the_longest_countdown():
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    assert options["visibility_timeout"] > settings.ALERT_RETRY_MAX + settings.ALERT_HTTP_TIMEOUT
    assert celery_app.conf.broker_connection_retry_on_startup is True
    assert celery_app.conf.broker_connection_max_retries is None  # a long outage: still retries
    # A timeout the default retry delays outlast is refused at start.
    refused = subprocess.run(
        [procs.PYTHON, "-c", "import django; django.setup()"], cwd=procs.REPO,
        env=procs.child_env(DJANGO_SETTINGS_MODULE="portal.settings",
                            CELERY_VISIBILITY_TIMEOUT="200"),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode != 0
    assert "CELERY_VISIBILITY_TIMEOUT must be longer" in refused.stderr


# --- the broker lost ----------------------------------------------------------------------


@pytest.mark.stack
@pytest.mark.django_db(transaction=True)
def test_a_worker_survives_redis_killed_and_restarted_empty(redis_server, env_for, tmp_path):
    notes = tmp_path / "notes"
    # Prefork, as production runs: the pool's late-acked message in flight is what made
    # kombu's restore fail and the worker exit (issue #27).
    worker = procs.start_celery_worker(
        env_for(redis_server), "broker-lost", "--include", "tests.celery_probe",
        "--concurrency", "1", pool="prefork",
    )  # fmt: skip
    try:
        assert {"celery", "deliveries", "polls"} <= {
            line.split()[1] for line in worker.lines if line.strip().startswith(".>")
        }
        send(redis_server, notes, "before", 2.0)
        wait_for_line(notes, "start before", 20)
        redis_server.kill()  # mid-task, its message unacknowledged
        time.sleep(1.0)
        redis_server.start()  # empty: --save '' and no AOF
        send(redis_server, notes, "after", 0.0)
        took = wait_for_line(notes, "done after", 30)
        assert worker.popen.poll() is None, "".join(worker.lines[-40:])
        assert not any("Unrecoverable error" in line for line in worker.lines)
        # The task that was running when Redis died ran to its end, once.
        assert sum(line.startswith("done before") for line in lines(notes)) == 1
        print(f"a task sent after the restart ran {took:.1f} s later")
    finally:
        worker.stop()


# --- a worker killed ----------------------------------------------------------------------


@pytest.mark.stack
@pytest.mark.django_db(transaction=True)
def test_a_task_whose_worker_is_killed_runs_again_on_the_next(redis_server, env_for, tmp_path):
    notes = tmp_path / "notes"
    # A short visibility timeout, so the message is handed out again within seconds (the
    # delivery retry settings shrunk to match: the settings refuse a timeout below them).
    env = env_for(
        redis_server, CELERY_VISIBILITY_TIMEOUT="3", ALERT_RETRY_MAX="0.5",
        ALERT_HTTP_TIMEOUT="0.5",
    )  # fmt: skip
    first = procs.start_celery_worker(env, "killed", "--include", "tests.celery_probe")
    try:
        send(redis_server, notes, "cut", 3.0)
        wait_for_line(notes, "start cut", 20)
        first.popen.send_signal(signal.SIGKILL)  # no chance to acknowledge or restore
        first.popen.wait()
    finally:
        first.stop()
    assert not any(line.startswith("done cut") for line in lines(notes))
    second = procs.start_celery_worker(env, "after-kill", "--include", "tests.celery_probe")
    try:
        took = wait_for_line(notes, "done cut", 30)
    finally:
        second.stop()
    started = [line.split()[2] for line in lines(notes) if line.startswith("start cut")]
    done = [line.split()[2] for line in lines(notes) if line.startswith("done cut")]
    assert len(started) == 2 and started[0] != started[1]  # the killed run, then the new one
    assert done == [started[1]]
    print(f"run again {took:.1f} s after the second worker started")


# --- a slow receiver ----------------------------------------------------------------------


@pytest.mark.stack
def test_a_receiver_that_hangs_holds_up_no_poll(worker_env, tmp_path):  # noqa: F811
    """Compose's layout: a worker for deliveries, another for polls and the rest. A
    webhook receiver that keeps the delivery worker waiting delays neither."""
    notes = tmp_path / "notes"
    rx = Receiver(hold=threading.Event())
    url, server = procs.serve(handler_for(rx))
    deliveries = procs.start_celery_worker(worker_env, "q-deliveries", "-Q", "deliveries")
    others = procs.start_celery_worker(
        worker_env, "q-others", "-Q", "polls,celery", "--include", "tests.celery_probe"
    )
    try:
        delivery_id = fire_to(channel("webhook", url), "Hanging receiver")
        assert rx.arrived.wait(30)  # the delivery worker is now stuck in the send
        began = time.monotonic()
        slow.apply_async((str(notes), "poll", 0.0), queue="polls")
        slow.apply_async((str(notes), "report", 0.0), queue="celery")
        wait_for_line(notes, "done poll", 10)
        wait_for_line(notes, "done report", 10)
        waited = time.monotonic() - began
        assert Delivery.objects.get(pk=delivery_id).status == DeliveryStatus.PENDING
        rx.hold.set()
        wait_until(lambda: Delivery.objects.get(pk=delivery_id).status != "pending", 30)
        assert Delivery.objects.get(pk=delivery_id).status == DeliveryStatus.DELIVERED
        print(f"a poll and a report ran {waited:.1f} s after, while the receiver hung")
    finally:
        rx.hold.set()
        deliveries.stop()
        others.stop()
        server.shutdown()
        server.server_close()


# --- beat ---------------------------------------------------------------------------------


def test_no_scheduled_run_waits_on_a_result():
    assert all(e["options"]["ignore_result"] for e in settings.CELERY_BEAT_SCHEDULE.values())


@pytest.mark.stack
def test_beat_keeps_its_time_while_redis_is_away(redis_server, child_env_for_test_db, tmp_path):
    import redis

    env = {**child_env_for_test_db, "REDIS_URL": redis_server.url, "GPU_POLL_INTERVAL": "1"}
    beat = procs.start(
        "celery-beat",
        [str(procs.BIN / "celery"), "-A", "portal", "beat", "--loglevel", "INFO",
         "--schedule", str(tmp_path / "beat-schedule")],
        env,
    )  # fmt: skip
    due = "Sending due task poll-agents"
    try:
        beat.wait_for(due, count=2, timeout=60)
        redis_server.kill()
        before = len(beat.lines)
        time.sleep(6)
        # The polls were tried through the outage (each failed publish costs its 0.6 s of
        # retries, so about one every 1.6 s): beat did not block.
        tried = sum(due in line for line in beat.lines[before:])
        redis_server.start()
        client = redis.Redis.from_url(redis_server.url)
        deadline = time.monotonic() + 10
        while not client.llen("polls"):
            assert time.monotonic() < deadline, "".join(beat.lines[-30:])
            time.sleep(0.1)
    finally:
        beat.stop()
    assert tried >= 3, "".join(beat.lines[before:])
    assert not any("celery.backends.redis" in line for line in beat.lines)
