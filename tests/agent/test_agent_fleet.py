"""The simulator's one-loop fleet: many nodes, lazy collection, keep-alive, prompt shutdown."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.collector import Collector
from agents.gpu_agent.lazy import LazyNode
from agents.gpu_agent.model import NodeSnapshot
from tests.agent.conftest import REPO_ROOT, agent_env, stop

MODEL = "NVIDIA A100-SXM4-80GB"


class CountingBackend:
    """A simulated node that counts its collections."""

    name = "sim"

    def __init__(self) -> None:
        self.inner = SimulatedBackend("count-01", 2, MODEL, seed=1)
        self.hostname = self.inner.hostname
        self.collections = 0

    def collect(self) -> NodeSnapshot:
        self.collections += 1
        return self.inner.collect()

    def close(self) -> None:
        self.inner.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _raw(port: int, request: bytes) -> tuple[str, list[str], bytes]:
    """Send one raw request; returns the status line, header names in order and the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, [line.split(":", 1)[0] for line in lines], body


def test_a_node_collects_once_per_interval_however_often_it_is_asked() -> None:
    backend = CountingBackend()
    node = LazyNode(backend, interval_s=3600)  # type: ignore[arg-type]
    assert backend.collections == 0  # nothing happens until someone asks
    first = node.snapshot_json()
    assert node.snapshot_json() is first
    assert node.metrics_text() is not None
    assert node.last_collect_age_s() is not None
    assert backend.collections == 1
    node.invalidate()
    assert node.snapshot_json() != first
    assert backend.collections == 2


def test_a_node_polled_after_its_interval_collects_fresh_data() -> None:
    backend = CountingBackend()
    node = LazyNode(backend, interval_s=0.05)  # type: ignore[arg-type]
    first = json.loads(node.snapshot_json() or b"")
    time.sleep(0.12)
    second = json.loads(node.snapshot_json() or b"")
    assert backend.collections == 2
    assert second["collected_at"] > first["collected_at"]


def test_a_lazy_node_serves_the_same_document_as_the_polling_collector() -> None:
    lazy = LazyNode(SimulatedBackend("same-01", 3, MODEL, seed=5, clock=lambda: 1000.0), 1.0)
    polling = Collector(SimulatedBackend("same-01", 3, MODEL, seed=5, clock=lambda: 1000.0), 1.0)
    lazy_doc = json.loads(lazy.snapshot_json() or b"")
    polled_doc = json.loads(polling.collect_once().snapshot_json)
    # Only the time the pass itself took may differ.
    assert lazy_doc.pop("collect_duration_s") >= 0
    polled_doc.pop("collect_duration_s")
    assert lazy_doc == polled_doc


def test_keep_alive_serves_every_endpoint_on_one_connection(
    start_agent: Callable[..., Any],
) -> None:
    agent = start_agent("--backend", "sim", "--gpus", "2", "--token", "T", "--hostname", "ka")
    connection = http.client.HTTPConnection("127.0.0.1", _port(agent.urls[0]), timeout=5)
    try:
        for path in ("/v1/snapshot", "/metrics", "/healthz", "/v1/desired-state", "/v1/snapshot"):
            connection.request("GET", path, headers={"Authorization": "Bearer T"})
            response = connection.getresponse()
            body = response.read()
            assert response.status == 200, (path, body)
            assert response.getheader("Connection") is None
        assert json.loads(body)["hostname"] == "ka"
        # Still the first socket: http.client would have reconnected silently otherwise.
        assert connection.sock is not None
    finally:
        connection.close()


def test_an_http_1_0_request_gets_its_answer_and_the_connection_closes(
    start_agent: Callable[..., Any],
) -> None:
    agent = start_agent("--backend", "sim", "--gpus", "1", "--no-auth")
    status, headers, body = _raw(_port(agent.urls[0]), b"GET /healthz HTTP/1.0\r\n\r\n")
    assert status == "HTTP/1.1 200 OK"
    assert "Connection" in headers
    assert json.loads(body)["status"] == "ok"


def test_a_simulated_node_answers_with_a_collector_nodes_status_and_headers(
    start_agent: Callable[..., Any], serve: Callable[..., str]
) -> None:
    agent = start_agent("--backend", "sim", "--gpus", "2", "--token", "T")
    collector = Collector(SimulatedBackend("ref-01", 2, MODEL, seed=1), 1.0)
    collector.collect_once()
    reference = _port(serve(collector, "T"))
    requests = [
        b"GET /v1/snapshot HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer T\r\n",
        b"GET /v1/snapshot HTTP/1.1\r\nHost: x\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
        b"GET /nowhere HTTP/1.1\r\nHost: x\r\n",
        b"POST /v1/desired-state HTTP/1.1\r\nHost: x\r\n",
        b"PUT /v1/desired-state HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer T\r\n",
    ]
    for request in requests:
        request += b"Connection: close\r\n\r\n"
        lazy = _raw(_port(agent.urls[0]), request)
        polled = _raw(reference, request)
        assert lazy[:2] == polled[:2], request
        if b"/v1/snapshot" not in request and b"/metrics" not in request:
            assert lazy[2] == polled[2], request


def test_desired_state_put_to_a_virtual_node_shows_in_its_next_snapshot(
    start_agent: Callable[..., Any], get: Callable[..., Any]
) -> None:
    agent = start_agent(
        "--backend", "sim", "--nodes", "2", "--gpus", "2", "--token", "T",
        "--interval", "60", nodes=2,
    )  # fmt: skip
    url = agent.urls[1]
    uuid = get(f"{url}/v1/snapshot", token="T").json()["gpus"][0]["uuid"]
    slice_ = {
        "allocation_id": "a-1", "gpu_uuid": uuid, "compute_pct": 50,
        "memory_mib": 1024, "owner": "alice",
    }  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", _port(url), timeout=5)
    try:
        body = json.dumps({"slices": [slice_]})
        headers = {"Authorization": "Bearer T", "Content-Type": "application/json"}
        connection.request("PUT", "/v1/desired-state", body=body, headers=headers)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        assert json.loads(response.read())["generation"] == 1
        # The same connection carries on after a request with a body.
        connection.request("GET", "/v1/snapshot", headers=headers)
        snapshot = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    # Not a minute later: a new desired state is attributed at once.
    assert [a["allocation_id"] for a in snapshot["allocations"]] == ["a-1"]
    other = get(f"{agent.urls[0]}/v1/desired-state", token="T").json()
    assert other["slices"] == []


def test_a_body_larger_than_the_receive_buffer_arrives_whole_on_two_connections_at_once(
    start_agent: Callable[..., Any],
) -> None:
    # The fleet receives every connection's bytes into one shared 64 KiB buffer: bodies
    # several times that size, sent in interleaved pieces on two connections, must not mix.
    agent = start_agent(
        "--backend", "sim", "--nodes", "2", "--gpus", "1", "--token", "T", "--interval", "60",
        nodes=2,
    )  # fmt: skip
    socks = [socket.create_connection(("127.0.0.1", _port(url)), timeout=5) for url in agent.urls]
    try:
        requests = []
        for padding in (150_000, 157_001):
            body = json.dumps({"slices": []}).encode() + b" " * padding
            head = (
                f"PUT /v1/desired-state HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer T\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            follow = b"GET /v1/desired-state HTTP/1.1\r\nAuthorization: Bearer T\r\n"
            requests.append(head + body + follow + b"Connection: close\r\n\r\n")
        for offset in range(0, max(map(len, requests)), 40_000):
            for sock, request in zip(socks, requests, strict=True):
                if chunk := request[offset : offset + 40_000]:
                    sock.sendall(chunk)
        for sock in socks:
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            assert re.findall(rb"HTTP/1\.1 (\d{3}) ", data) == [b"200", b"200"]
            assert data.count(b'"generation":1') == 2
    finally:
        for sock in socks:
            sock.close()


def test_sigterm_stops_a_250_node_simulator_promptly_with_code_0(
    start_agent: Callable[..., Any], get: Callable[..., Any]
) -> None:
    agent = start_agent(
        "--backend", "sim", "--nodes", "250", "--gpus", "8", "--no-auth", "--hostname", "big",
        "--interval", "5", nodes=250,
    )  # fmt: skip
    assert agent.nodes[-1] == "big-250"
    assert get(f"{agent.urls[-1]}/v1/snapshot").json()["hostname"] == "big-250"
    # One loop thread, not a server and a collector per node.
    threads = len(list(Path(f"/proc/{agent.proc.pid}/task").iterdir()))
    assert threads <= 2
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(10) == 0
    assert "Traceback" not in agent.stderr()


def test_sigint_during_start_up_of_many_nodes_still_exits_cleanly(tmp_path: Path) -> None:
    # Port 0: every node gets a free port, so no block of 300 has to be found first.
    command = [
        sys.executable, "-m", "agents.gpu_agent", "--backend", "sim", "--nodes", "300",
        "--gpus", "8", "--no-auth", "--listen", "127.0.0.1:0",
    ]  # fmt: skip
    with (tmp_path / "stderr.log").open("w") as stderr:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=agent_env(), stdout=subprocess.PIPE, stderr=stderr,
            text=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("gpu-agent listening on")
        # The other nodes may still be binding: the signal must not wait for them.
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    finally:
        stop(proc)
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


def test_pipelined_and_split_requests_are_answered_in_order(
    start_agent: Callable[..., Any],
) -> None:
    agent = start_agent("--backend", "sim", "--gpus", "1", "--no-auth")
    with socket.create_connection(("127.0.0.1", _port(agent.urls[0])), timeout=5) as sock:
        # Two requests in one packet, then a third cut in the middle of its headers.
        sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\nGET /nowhere HTTP/1.1\r\n\r\nGET /v1/snap")
        time.sleep(0.05)
        sock.sendall(b"shot HTTP/1.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    # Each status line follows the previous body directly (bodies end without a newline).
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", data) == [b"200", b"404", b"200"]
