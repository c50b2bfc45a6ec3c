"""manage.py doctor on the real services: PostgreSQL, Redis (cache, channel layer, broker),
a real Celery worker answering for its queues, a real SMTP server; and the failing cases
(Redis on a closed port: FAIL lines and exit 1, quickly)."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller
from django.core.management import call_command
from django.utils import timezone

from portal import crypto
from portal.management import doctor
from telemetry import services as telemetry_services
from telemetry.poller import PollResult
from tests import procs
from tests.factories import NodeFactory
from tests.test_fleet_services import gpu, snapshot

STRONG_KEY = "k3Jv9Qx-2mZpL8wR_tY5nB7cD1fG4hS6aE0uI3oP9lK2jH8gF5dS7aQ1wE4rT6y"


def by_name(results: list[doctor.Result]) -> dict[str, doctor.Result]:
    return {r.name: r for r in results}


# --- the stores ------------------------------------------------------------------------


def test_the_database_and_its_migrations_answer_ok(db):
    result = doctor.check_database()
    assert result.status == doctor.OK, result
    assert "PostgreSQL" in result.message
    assert doctor.check_migrations().status == doctor.OK


def test_redis_cache_channel_layer_and_broker_answer_ok():
    assert doctor.check_cache().status == doctor.OK
    layer = doctor.check_channel_layer(timeout=5)
    assert layer.status == doctor.OK, layer
    assert doctor.check_broker().status == doctor.OK


def test_workers_answer_for_their_queues_and_a_queue_without_one_fails(db, child_env_for_test_db):
    worker = procs.start_celery_worker(child_env_for_test_db, "doctor", "-Q", "polls,celery")
    try:
        results = by_name(doctor.check_workers(timeout=2.0))
    finally:
        worker.stop()
    assert results["workers:polls"].status == doctor.OK, results
    assert "doctor@" in results["workers:polls"].message
    assert results["workers:celery"].status == doctor.OK
    assert results["workers:deliveries"].status == doctor.FAIL
    assert "-Q deliveries" in results["workers:deliveries"].hint


def test_beat_is_alive_while_poll_cycles_finish(db):
    assert doctor.check_beat().status == doctor.FAIL  # nothing polled yet (Redis is empty)
    telemetry_services.poll_fleet([])  # what the poll beat queues does, with no node due
    assert doctor.check_beat().status == doctor.OK
    time.sleep(0.3)
    stale = doctor.check_beat(max_age=0.1)
    assert stale.status == doctor.FAIL and "ago" in stale.message


# --- settings --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, weak",
    [("insecure-test-only-key", True), ("django-insecure-" + "x1y2z3" * 10, True),
     ("a" * 60, True), ("short-but-random-Q9x", True), (STRONG_KEY, False)],
)  # fmt: skip
def test_a_weak_secret_key_fails_in_production(settings, key, weak):
    settings.SECRET_KEY, settings.DEBUG = key, False
    result = by_name(doctor.check_secret_key())["secret-key"]
    assert result.status == (doctor.FAIL if weak else doctor.OK), result


def test_debug_on_with_the_production_stores_fails(settings):
    settings.DEBUG = True
    assert doctor.check_debug().status == doctor.FAIL
    settings.DEBUG = False
    assert doctor.check_debug().status == doctor.OK


def test_hosts_and_origins(settings):
    settings.DEBUG = False
    settings.ALLOWED_HOSTS, settings.CSRF_TRUSTED_ORIGINS = ["gpu.example.com"], []
    settings.PORTAL_BASE_URL = "https://gpu.example.com"
    assert {r.status for r in doctor.check_hosts()} == {doctor.OK}
    settings.PORTAL_BASE_URL = "https://portal.example.org:8443"
    hosts = by_name(doctor.check_hosts())["allowed-hosts"]
    assert hosts.status == doctor.FAIL and "portal.example.org" in hosts.message
    settings.ALLOWED_HOSTS, settings.PORTAL_BASE_URL = (
        ["[2001:db8::5]"],
        "http://[2001:db8::5]:8000/portal",
    )
    assert by_name(doctor.check_hosts())["allowed-hosts"].status == doctor.OK
    settings.PORTAL_BASE_URL, settings.ALLOWED_HOSTS = "", ["*"]
    assert by_name(doctor.check_hosts())["allowed-hosts"].status == doctor.WARN
    settings.ALLOWED_HOSTS = []
    assert by_name(doctor.check_hosts())["allowed-hosts"].status == doctor.FAIL
    settings.ALLOWED_HOSTS, settings.CSRF_TRUSTED_ORIGINS = ["gpu.example.com"], ["gpu.example.com"]
    assert by_name(doctor.check_hosts())["csrf-origins"].status == doctor.FAIL
    settings.BEHIND_TLS_PROXY, settings.CSRF_TRUSTED_ORIGINS = True, ["http://gpu.example.com"]
    assert by_name(doctor.check_hosts())["csrf-origins"].status == doctor.WARN


# --- the fleet -------------------------------------------------------------------------


def test_nodes_that_answered_lately_are_counted(db):
    assert doctor.check_agents()[0].status == doctor.WARN  # none registered
    now = timezone.now()
    NodeFactory(name="fresh", last_seen=now - timedelta(minutes=1))
    NodeFactory(name="silent", last_seen=now - timedelta(minutes=30))
    (result,) = doctor.check_agents(minutes=5)
    assert result.status == doctor.WARN and "1 of 2" in result.message
    assert "silent" in result.message and "fresh" not in result.message
    (result,) = doctor.check_agents(minutes=0.5)
    assert result.status == doctor.FAIL and "0 of 2" in result.message
    (result,) = doctor.check_agents(minutes=60)
    assert result.status == doctor.OK


def test_an_agent_whose_clock_is_off_is_named(db):
    good, off = NodeFactory(name="on-time"), NodeFactory(name="late-clock")
    now = time.time()
    on_time = {**snapshot("a", gpu("GPU-ON")), "collected_at": now - 1}
    late = {**snapshot("b", gpu("GPU-OFF")), "collected_at": now - 300}
    telemetry_services.record_poll_results([PollResult(good.pk, on_time, "", 0.01)])
    assert doctor.check_clock_skew().status == doctor.OK
    telemetry_services.record_poll_results([PollResult(off.pk, late, "", 0.01)])
    result = doctor.check_clock_skew()
    assert result.status == doctor.WARN and "late-clock" in result.message
    assert "on-time" not in result.message


def test_agent_tokens_stored_under_a_key_no_longer_configured_fail(db, settings):
    old, new = crypto.generate_key(), crypto.generate_key()
    settings.FIELD_ENCRYPTION_KEYS = [old]
    NodeFactory(name="stored-under-old")
    assert doctor.check_agent_tokens().status == doctor.OK
    settings.FIELD_ENCRYPTION_KEYS = [new]
    result = doctor.check_agent_tokens()
    assert result.status == doctor.FAIL and "stored-under-old" in result.message
    settings.FIELD_ENCRYPTION_KEYS = [new, old]  # rotation: the old key still opens it
    assert doctor.check_agent_tokens().status == doctor.OK


# --- the host --------------------------------------------------------------------------


class _Accept:
    async def handle_RCPT(self, server, session, envelope, address, options):
        return "250 OK"


def test_smtp_reachable_and_not(settings):
    controller = Controller(_Accept(), hostname="127.0.0.1", port=procs.free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    try:
        assert doctor.check_smtp().status == doctor.OK
    finally:
        controller.stop()
    started = time.monotonic()
    result = doctor.check_smtp(timeout=2)
    assert result.status == doctor.FAIL and "127.0.0.1" in result.message
    assert time.monotonic() - started < 5
    settings.EMAIL_HOST, settings.EMAIL_PORT = "localhost", 1  # the unconfigured default
    assert doctor.check_smtp(timeout=2).status == doctor.WARN


def test_disk_space(tmp_path):
    assert doctor.check_disk(tmp_path, warn_free=0, fail_free=0, warn_bytes=0,
                             fail_bytes=0).status == doctor.OK  # fmt: skip
    assert doctor.check_disk(tmp_path, warn_free=1.01, fail_free=0).status == doctor.WARN
    assert doctor.check_disk(tmp_path, fail_free=1.01).status == doctor.FAIL


# --- the command -----------------------------------------------------------------------


def test_the_command_prints_json_and_exits_1_on_a_fail(db, capsys):
    # No worker runs here: the worker lines fail, so the command exits 1.
    with pytest.raises(SystemExit) as exit_:
        call_command("doctor", "--json", "--timeout", "1")
    assert exit_.value.code == 1
    answer = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in answer["checks"]}
    assert answer["ok"] is False
    assert checks["database"]["status"] == "ok" and checks["redis"]["status"] == "ok"
    assert checks["channel-layer"]["status"] == "ok"
    assert checks["workers:polls"]["status"] == "FAIL" and checks["workers:polls"]["hint"]
    assert set(checks) >= {"migrations", "broker", "beat", "secret-key", "debug",
                           "allowed-hosts", "csrf-origins", "agents", "smtp", "disk"}  # fmt: skip


def test_redis_on_a_closed_port_fails_quickly_with_exit_1(db, child_env_for_test_db):
    env = {**child_env_for_test_db, "REDIS_URL": f"redis://127.0.0.1:{procs.free_port()}/0"}
    started = time.monotonic()
    done = subprocess.run(
        [procs.PYTHON, "manage.py", "doctor"], cwd=procs.REPO, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stdout + done.stderr
    lines = {line.split()[1]: line.split()[0] for line in done.stdout.splitlines()
             if line and not line.startswith(" ")}  # fmt: skip
    assert lines["redis"] == "FAIL" and lines["broker"] == "FAIL", done.stdout
    assert lines["database"] == "ok", done.stdout
    assert lines["channel-layer"] == "warn"  # not checked without Redis
    # Django's start-up included; the Redis checks themselves fail at once (refused).
    assert elapsed < 30, elapsed


def test_a_check_that_hangs_is_a_fail_line_when_its_time_is_up():
    # A host that drops packets holds a connect for minutes; the doctor gives up on it.
    started = time.monotonic()
    [result] = doctor.bounded("hangs", lambda: time.sleep(5) or doctor.Result("x", "ok", ""), 0.3)
    assert result.status == doctor.FAIL and "0.3 s" in result.message
    assert time.monotonic() - started < 2
    [result] = doctor.bounded("breaks", lambda: 1 / 0, 5)
    assert result.status == doctor.FAIL and "ZeroDivisionError" in result.message
