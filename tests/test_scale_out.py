"""Two web processes (daphne) on one PostgreSQL and one Redis, as docs/operations.md lays
out a scaled-out portal: a live page's socket on process A hears a request made through
the API of process B, and a client waiting on A (``?wait=``) is answered when an approver
approves on B. What joins them is the channel layer in Redis, nothing process-local."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import threading
import time
from urllib.parse import urlsplit

import pytest

from tests import clients, procs
from tests.factories import gpu_team
from tests.live_api import call, token

URL = "/api/v1/gpu-requests/"
pytestmark = pytest.mark.django_db(transaction=True)


class RawSocket:
    """A browser's websocket, by hand (no client library in the environment): the upgrade
    request with the session cookie and the page's origin, then the server's text frames."""

    def __init__(self, base_url: str, path: str, cookie: bytes) -> None:
        where = urlsplit(base_url)
        self.sock = socket.create_connection((where.hostname, where.port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\nUpgrade: websocket\r\n"
             f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
             f"Origin: {base_url}\r\nCookie: {cookie.decode()}\r\n\r\n").encode()
        )  # fmt: skip
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(4096)
            assert chunk, "closed during the handshake"
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        self.status = head.split(b"\r\n", 1)[0]

    def _read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the socket")
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def texts(self, timeout: float) -> list[str]:
        """Text frames that arrive within ``timeout`` seconds (pings and the like skipped)."""
        deadline, got = time.monotonic() + timeout, []
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                first, second = self._read(2)
            except TimeoutError:
                break
            length = second & 0x7F
            if length == 126:
                (length,) = struct.unpack("!H", self._read(2))
            elif length == 127:
                (length,) = struct.unpack("!Q", self._read(8))
            payload = self._read(length)  # server frames are not masked
            if first & 0x0F == 0x1:
                got.append(payload.decode())
            elif first & 0x0F == 0x8:
                raise ConnectionError(f"closed by the server: {payload!r}")
        return got

    def close(self) -> None:
        self.sock.close()


def test_a_socket_on_one_web_process_hears_an_api_call_to_another(child_env_for_test_db):
    team = gpu_team("vision")
    dev, approver = token(team.dev), token(team.approver)
    body = {"tenant": team.tenant.pk, "pool": team.pool.pk, "count": 1, "compute_pct": 25,
            "memory_mib": 8192, "duration_hours": 4, "reason": "scale-out"}  # fmt: skip
    # A step's pushes go out from a Celery worker (quotas.tasks.send_notices), as in
    # production, whichever web process made the step.
    with procs.celery_worker(child_env_for_test_db, "scale-out") as worker, \
            procs.daphne(child_env_for_test_db) as (a, proc_a), \
            procs.daphne(child_env_for_test_db) as (b, proc_b):  # fmt: skip
        assert proc_a.popen.pid != proc_b.popen.pid and a != b
        page = RawSocket(a, "/ws/requests/", clients.cookie_header(team.approver)[1])
        try:
            assert b" 101 " in page.status + b" ", page.status
            assert page.texts(0.3) == []  # nothing yet: the page only listens
            created = call(b, "POST", URL, dev, body)
            assert created.status == 201, created.body
            req_id = created.body["id"]
            heard = [json.loads(text) for text in page.texts(10)]
        finally:
            page.close()
        assert req_id in [event.get("request") for event in heard], heard

        # A CI job waiting on A is answered by an approval on B.
        answer: list = []
        waiter = threading.Thread(target=lambda: answer.append(
            call(a, "GET", f"{URL}{req_id}/?wait=60", dev, timeout=45)))  # fmt: skip
        waiter.start()
        time.sleep(1.5)  # the waiter is listening by now; if not, it reads the new state
        approved = call(b, "POST", f"{URL}{req_id}/approve/", approver, {"comment": "ok"})
        assert approved.status == 200, approved.body
        waiter.join(timeout=50)
    # Answered with the new state before its 60 s ran out (woken by B's push, or by the
    # waiter's own recheck: not timed here, tests/test_api_wait.py has the push alone).
    [got] = answer
    assert got.status == 200 and got.body["state"] == "allocated", got.body
    for proc in (proc_a, proc_b, worker):
        output = "".join(proc.lines)
        assert "Traceback" not in output, output
