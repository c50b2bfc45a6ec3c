"""The scaled-out portal under load, one web process and one worker SIGKILLed mid-load
(issue #27): two daphne and two Celery workers on one PostgreSQL and one Redis, beat,
simulated agents polled every second; client threads asking for GPUs (create, approve
where the policy asks for it, wait until placed, release) through both web processes, and
live sockets (the requests page's and the fleet page's) on both.

Both workers consume all three queues (a worker without ``-Q``): with the README's
worker per queue, one of each killed would leave its queue without a consumer unless
every queue had two workers, six in all, more than two cores carry next to the rest.
Two that each take every queue are the smallest layout where any one may die.

What must hold: every request ends placed and released, a call cut by the kill is retried
on the survivor with its Idempotency-Key and nothing is made twice; capacity and quota
are back to zero; the killed worker's tasks run again on the survivor (late acks, a short
CELERY_VISIBILITY_TIMEOUT); the survivor's sockets keep receiving and the killed one's
open again on the survivor and receive there. docs/reliability.md has the figures."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import struct
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db.models import Sum

from agents.models import GPU, Node
from audit.models import AuditEntry
from pools.choices import AllocationState, LeaseState
from pools.models import Allocation, Lease, PoolCard
from quotas.choices import RequestState, Role
from quotas.models import GpuRequest
from quotas.requests.services import allocated_usage
from telemetry import services as telemetry
from tests import clients, procs
from tests.celery_probe import hold
from tests.factories import MembershipFactory, PoolFactory, QuotaFactory, TenantFactory
from tests.live_api import Answer, call, token
from tests.test_scale_out import RawSocket

pytestmark = [pytest.mark.stack, pytest.mark.django_db(transaction=True)]

URL = "/api/v1/gpu-requests/"
CLIENTS = 6  # threads, half of them sent first to each web process
ROUNDS = 8  # requests per client
KILL_AFTER = 16  # rounds done, all clients together, before the kills (< CLIENTS * (ROUNDS - 2))
PUSHES_AFTER = 3  # fleet pushes each fleet socket must get after the kill (its reconnect)
WAIT = 120  # seconds any condition may take on a loaded machine: a hang, not a speed


def wait_until(check: Callable[[], bool], what: Callable[[], str], timeout: float = WAIT):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what()
        time.sleep(0.1)


# --- live sockets -------------------------------------------------------------------------


def _frame(data: bytes) -> tuple[int, bytes, int] | None:
    """(opcode, payload, bytes used) of the first whole server frame, None before it is."""
    if len(data) < 2:
        return None
    length, at = data[1] & 0x7F, 2
    if length == 126:
        if len(data) < 4:
            return None
        (length,), at = struct.unpack("!H", data[2:4]), 4
    elif length == 127:
        if len(data) < 10:
            return None
        (length,), at = struct.unpack("!Q", data[2:10]), 10
    if len(data) < at + length:
        return None
    return data[0] & 0x0F, data[at : at + length], at + length


def _pong(payload: bytes) -> bytes:
    mask = os.urandom(4)  # a client's frames are masked
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x8A, 0x80 | len(payload)]) + mask + masked


class LiveClient(threading.Thread):
    """A live page's socket that, like the page's script behind a load balancer, opens
    again when its web process goes away, and lands on the other one."""

    def __init__(self, name: str, path: str, cookie: bytes, servers: list[str]) -> None:
        super().__init__(name=name, daemon=True)
        self.path, self.cookie, self.servers, self.at = path, cookie, servers, 0
        self.messages: list[tuple[float, str, dict]] = []  # (monotonic, server, message)
        self.connects: list[tuple[float, str]] = []
        self.failures: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            server = self.servers[self.at]
            sock = None
            try:
                sock = RawSocket(server, self.path, self.cookie)
                if b" 101 " not in sock.status + b" ":
                    raise ConnectionError(sock.status.decode())
                self.connects.append((time.monotonic(), server))
                self._listen(sock, server)
            except (OSError, AssertionError) as exc:  # refused, reset, closed mid-handshake
                self.failures.append(f"{server}: {exc!r}")
                self.at = 1 - self.at
                self.done.wait(0.2)
            finally:
                if sock is not None:
                    sock.close()

    def _listen(self, sock: RawSocket, server: str) -> None:
        sock.sock.settimeout(0.5)
        data = sock.buffer
        while not self.done.is_set():
            frame = _frame(data)
            if frame is None:
                try:
                    chunk = sock.sock.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    raise ConnectionError("the server closed the socket")
                data += chunk
                continue
            opcode, payload, used = frame
            data = data[used:]
            if opcode == 0x1:
                self.messages.append((time.monotonic(), server, json.loads(payload)))
            elif opcode == 0x9:
                sock.sock.sendall(_pong(payload))
            elif opcode == 0x8:
                raise ConnectionError(f"closed by the server: {payload!r}")

    def since(self, moment: float, server: str | None = None) -> list[dict]:
        return [m for at, where, m in list(self.messages)
                if at > moment and server in (None, where)]  # fmt: skip


# --- API clients --------------------------------------------------------------------------


@dataclass
class Release:
    request: int
    sent: float  # monotonic, when the release call was first sent
    replayed: bool  # answered from the Idempotency-Key's record (its first try was cut)


@dataclass
class Client:
    """One CI job's loop of requests, retrying a call cut by a lost web process on the
    other one with the same Idempotency-Key, as gpuctl does on a connection error."""

    name: str
    servers: list[str]
    dev: str
    approver: str
    tenant: int
    pool: int
    rounds: Callable[[], None]  # called after each round done
    killed: threading.Event  # the last two rounds wait for the kills: every client sees them
    at: int = 0
    retried: int = 0
    created: list[int] = field(default_factory=list)
    replays: int = 0
    releases: list[Release] = field(default_factory=list)
    error: BaseException | None = None

    def api(
        self, method: str, path: str, auth: str, body: dict | None = None, key: str = ""
    ) -> Answer:
        headers = {"Idempotency-Key": key} if key else {}
        for _attempt in range(60):
            try:
                answer = call(self.servers[self.at], method, path, auth, body, headers)
            except (OSError, http.client.HTTPException):  # refused, reset, cut mid-answer
                self.retried += 1
                self.at = 1 - self.at
                time.sleep(0.2)
                continue
            code = (answer.body or {}).get("error", {}).get("code") if answer.status >= 400 else ""
            if answer.status in (429, 502, 503) or code == "idempotency_in_progress":
                self.retried += 1
                time.sleep(float(answer.headers.get("retry-after", "0.5")))
                continue
            if answer.headers.get("idempotent-replayed") == "true":
                self.replays += 1
            return answer
        raise AssertionError(f"{self.name}: {method} {path} never answered")

    def one_round(self, n: int) -> None:
        key = f"{self.name}-{n}-{uuid.uuid4().hex[:8]}"
        # Even rounds are within the policy (approved and placed at create), odd ones wait
        # for the approver.
        body = {"tenant": self.tenant, "pool": self.pool, "count": 1,
                "compute_pct": 25 if n % 2 == 0 else 50, "memory_mib": 8192,
                "duration_hours": 4, "reason": f"scale-out {key}"}  # fmt: skip
        created = self.api("POST", URL, self.dev, body, key=f"{key}-create")
        assert created.status == 201, created.body
        req_id = created.body["id"]
        self.created.append(req_id)
        if created.body["state"] == RequestState.PENDING:
            approved = self.api("POST", f"{URL}{req_id}/approve/", self.approver,
                                {"comment": "ok"}, key=f"{key}-approve")  # fmt: skip
            assert approved.status == 200, approved.body
        while (state := created.body["state"]) != RequestState.ALLOCATED:
            assert state in (RequestState.PENDING, RequestState.APPROVED), created.body
            created = self.api("GET", f"{URL}{req_id}/?wait=20", self.dev)
            assert created.status == 200, created.body
        sent = time.monotonic()
        released = self.api("POST", f"{URL}{req_id}/release/", self.dev, key=f"{key}-release")
        assert released.status == 200, released.body
        assert released.body["state"] == RequestState.RELEASED, released.body
        replayed = released.headers.get("idempotent-replayed") == "true"
        self.releases.append(Release(req_id, sent, replayed))

    def run(self) -> None:
        try:
            for n in range(ROUNDS):
                if n == ROUNDS - 2:
                    assert self.killed.wait(WAIT * 2), "no kill"
                self.one_round(n)
                self.rounds()
        except BaseException as exc:  # reported by the test's thread
            self.error = exc


# --- the processes ------------------------------------------------------------------------


def _web(env: dict[str, str]) -> tuple[str, procs.Proc]:
    port = procs.free_port()
    proc = procs.start("daphne", [str(procs.BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port),
                                  "portal.asgi:application"], env)  # fmt: skip
    return f"http://127.0.0.1:{port}", proc


def _kill_group(proc: procs.Proc) -> None:
    """SIGKILL a worker and its pool's children at once, as its host or container dies."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.popen.pid, signal.SIGKILL)
    proc.popen.wait()


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX"
    except (FileNotFoundError, IndexError):
        return True


def _notes(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_two_web_processes_and_two_workers_lose_nothing_when_one_of_each_is_killed(
    child_env_for_test_db, sim_agents, tmp_path
):
    agents = sim_agents(nodes=2, gpus=4)
    for i, url in enumerate(agents.urls):
        Node.objects.create(name=f"sim-{i}", agent_url=url, agent_token=agents.token)
    telemetry.poll_fleet()  # the cards, recorded once before the pool is made of them
    cards = list(GPU.objects.all())
    assert len(cards) == 8
    pool = PoolFactory(cards=cards)
    tenant = TenantFactory(name="scale", slug="scale")
    QuotaFactory(tenant=tenant, pool=pool, auto_approve_vgpus=1, auto_approve_compute_pct=25,
                 auto_approve_hours=4)  # fmt: skip
    approver = MembershipFactory(tenant=tenant, role=Role.APPROVER).user
    devs = [MembershipFactory(tenant=tenant, role=Role.MEMBER).user for _ in range(CLIENTS)]

    env = {
        **child_env_for_test_db,
        # A message of a killed worker is handed out again 6 s after it was taken (the
        # delivery retry settings shrunk to match, as test_celery_faults does).
        "CELERY_VISIBILITY_TIMEOUT": "6", "ALERT_RETRY_MAX": "0.5", "ALERT_HTTP_TIMEOUT": "0.5",
        "GPU_POLL_INTERVAL": "1", "REQUESTS_PLACE_EVERY_S": "1",
    }  # fmt: skip
    notes, flag = tmp_path / "notes", tmp_path / "let-go"
    started: list[procs.Proc] = []
    live: list[LiveClient] = []
    try:
        a, web_a = _web(env)
        b, web_b = _web(env)
        # Prefork, as production runs; each in a process group of its own (the kill).
        options = ("--include", "tests.celery_probe", "--concurrency", "2")
        workers = [
            procs.start_celery_worker(
                env, f"scale-{n}", *options, pool="prefork", wait=False, session=True
            )
            for n in (1, 2)
        ]
        beat = procs.start("celery-beat", [
            str(procs.BIN / "celery"), "-A", "portal", "beat", "--loglevel", "INFO",
            "--schedule", str(tmp_path / "beat-schedule")], env)  # fmt: skip
        started += [web_a, web_b, *workers, beat]
        procs.wait_http(f"{a}/healthz", timeout=180, proc=web_a)
        procs.wait_http(f"{b}/healthz", timeout=180, proc=web_b)
        for worker in workers:
            worker.wait_for("ready.", timeout=120)

        for home, other in ((a, b), (b, a)):
            for path in ("/ws/requests/", "/ws/fleet/"):
                cookie = clients.cookie_header(approver)[1]
                live.append(LiveClient(f"{path} on {home}", path, cookie, [home, other]))
        for socket in live:
            socket.start()
        wait_until(lambda: all(s.connects for s in live), lambda: f"{[s.failures for s in live]}")

        rounds_done = [0]
        lock = threading.Lock()

        def one_done() -> None:
            with lock:
                rounds_done[0] += 1

        killed = threading.Event()
        dev_tokens, approver_token = [token(dev) for dev in devs], token(approver)
        jobs = []
        for n in range(CLIENTS):
            servers = [a, b] if n % 2 == 0 else [b, a]
            jobs.append(Client(f"c{n}", servers, dev_tokens[n], approver_token, tenant.pk,
                               pool.pk, one_done, killed))  # fmt: skip
        threads = [threading.Thread(target=job.run, daemon=True) for job in jobs]
        for thread in threads:
            thread.start()

        # Mid-load, with every socket hearing what happens.
        def ready_to_kill() -> bool:
            errors = [job.error for job in jobs if job.error]
            assert not errors, errors
            return rounds_done[0] >= KILL_AFTER and all(len(s.messages) >= 2 for s in live)

        wait_until(ready_to_kill, lambda: f"{rounds_done[0]} rounds; "
                   f"{[len(s.messages) for s in live]} messages")  # fmt: skip
        # A task that holds one worker's pool process until the kill, which is then
        # mid-task whichever worker took it, with no timer to race. Sent just before: a
        # task running longer than the visibility timeout is handed out again (as the
        # settings warn), the kill or not.
        hold.apply_async((str(notes), "held", str(flag)))
        wait_until(lambda: any(n[:2] == ["start", "held"] for n in _notes(notes)),
                   lambda: "".join(workers[0].lines[-20:] + workers[1].lines[-20:]))  # fmt: skip
        [(_, _, held_pid, held_parent, _)] = _notes(notes)
        doomed = next(w for w in workers if w.popen.pid == int(held_parent))
        survivor = next(w for w in workers if w is not doomed)
        broker = redis.Redis.from_url(settings.REDIS_URL)
        in_flight = set(broker.hkeys("unacked"))
        rounds_at_kill = rounds_done[0]
        web_a.popen.send_signal(signal.SIGKILL)
        _kill_group(doomed)
        web_a.popen.wait()
        killed_at, killed_wall = time.monotonic(), time.time()
        wait_until(lambda: _gone(int(held_pid)), lambda: f"pool process {held_pid} lives")
        flag.touch()  # the run again on the survivor ends at once
        killed.set()

        for thread in threads:
            thread.join(timeout=WAIT * 2)
        assert not any(thread.is_alive() for thread in threads)
        errors = [(job.name, job.error) for job in jobs if job.error]
        assert not errors, errors
        # Every client sent first to the killed process met the kill, and went on.
        assert all(job.retried for job in jobs if job.servers[0] == a), [j.retried for j in jobs]

        # The killed worker's task ran again, on the survivor, to its end.
        wait_until(lambda: any(n[:2] == ["done", "held"] for n in _notes(notes)),
                   lambda: "".join(survivor.lines[-30:]))  # fmt: skip
        runs = _notes(notes)
        assert [n[3] for n in runs if n[0] == "start"] == [held_parent, str(survivor.popen.pid)]
        assert [n[3] for n in runs if n[0] == "done"] == [str(survivor.popen.pid)]
        # Every message that was taken and not yet acknowledged at the kill (the killed
        # worker's among them) was handed out again and acknowledged.
        wait_until(
            lambda: not in_flight & set(broker.hkeys("unacked")),
            lambda: f"still unacked: {in_flight & set(broker.hkeys('unacked'))}",
        )

        # Live clients: the survivor's kept their socket and kept hearing; the killed
        # one's opened again on the survivor and hear there.
        releases = [r for job in jobs for r in job.releases]

        def heard_every_release(socket: LiveClient) -> bool:
            since = max(killed_at, socket.connects[-1][0])
            # A release sent after the socket (re)joined, answered at its first try: its
            # step was queued before the answer (on commit) and must reach the page.
            due = {r.request for r in releases if r.sent > since and not r.replayed}
            heard = {m.get("request") for m in socket.since(since)
                     if m.get("state") == RequestState.RELEASED}  # fmt: skip
            return due <= heard

        def pushes(socket: LiveClient) -> int:
            since = max(killed_at, socket.connects[-1][0])
            return len(socket.since(since))

        for socket in live:
            if "fleet" in socket.path:
                wait_until(lambda s=socket: pushes(s) >= PUSHES_AFTER + 1,
                           lambda s=socket: f"{s.name}: {pushes(s)} {s.failures}")  # fmt: skip
            else:
                wait_until(lambda s=socket: heard_every_release(s),
                           lambda s=socket: f"{s.name}: {s.failures}")  # fmt: skip
        for socket in live:
            assert socket.connects[-1][1] == b, (socket.name, socket.connects)
            if socket.servers[0] == b:
                assert len(socket.connects) == 1, (socket.name, socket.failures)
        assert all(len(s.connects) >= 2 for s in live if s.servers[0] == a)
    finally:
        for socket in live:
            socket.done.set()
        for socket in live:
            socket.join(timeout=5)
        flag.touch()
        for proc in started:
            proc.stop()
            if proc.name.startswith("celery-worker"):
                _kill_group(proc)

    # Nothing lost, nothing twice.
    made = [req_id for job in jobs for req_id in job.created]
    assert len(made) == len(set(made)) == CLIENTS * ROUNDS
    assert set(GpuRequest.objects.values_list("pk", flat=True)) == set(made)
    assert set(GpuRequest.objects.values_list("state", flat=True)) == {RequestState.RELEASED}
    for action in ("request.create", "request.place", "request.released"):
        assert AuditEntry.objects.filter(action=action).count() == len(made), action
    leases = GpuRequest.objects.values_list("lease_id", flat=True)
    assert None not in leases and len(set(leases)) == len(made)
    assert Lease.objects.count() == len(made)
    assert set(Lease.objects.values_list("state", flat=True)) == {LeaseState.RELEASED}
    assert Allocation.objects.count() == len(made)
    assert set(Allocation.objects.values_list("state", flat=True)) == {AllocationState.RELEASED}
    # Capacity and quota back to zero.
    held = PoolCard.objects.aggregate(c=Sum("compute_allocated"), m=Sum("memory_allocated_mib"),
                                      s=Sum("slices"))  # fmt: skip
    assert held == {"c": 0, "m": 0, "s": 0}
    assert not PoolCard.objects.filter(held_whole=True).exists()
    usage = allocated_usage(tenant.pk, pool.pk)
    assert (usage.vgpus, usage.compute_pct, usage.memory_mib) == (0, 0, 0)
    for proc in (web_b, survivor):
        output = "".join(proc.lines)
        assert "Traceback" not in output, output[-4000:]

    figures = {
        "rounds": len(made), "rounds_at_kill": rounds_at_kill,
        "retried_calls": sum(job.retried for job in jobs),
        "replayed_answers": sum(job.replays for job in jobs),
        "rerun_after_kill_s": round(float(runs[1][4]) - killed_wall, 1),
        "in_flight_at_kill": len(in_flight),
        "live": {s.name: {"before": len([m for at, _, m in s.messages if at <= killed_at]),
                          "after": len(s.since(killed_at)), "connects": len(s.connects)}
                 for s in live},
    }  # fmt: skip
    print(json.dumps(figures, indent=1))
