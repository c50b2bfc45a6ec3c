"""The poller against real agents and real misbehaving HTTP servers on loopback."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from agents import poller
from tests import procs


class _Handler(BaseHTTPRequestHandler):
    mode = "garbage"

    def do_GET(self) -> None:
        if self.mode == "hang":
            time.sleep(30)
            return
        body = {"garbage": b"<html>not json", "shapeless": b'{"gpus": [{"index": 0}]}'}[self.mode]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def bad_server() -> Iterator:
    servers = []

    def start(mode: str) -> str:
        handler = type("Handler", (_Handler,), {"mode": mode})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _poll(targets: list[poller.AgentTarget], timeout: float = 2.0) -> dict[int, poller.PollResult]:
    return {r.node_id: r for r in poller.poll(targets, timeout=timeout, concurrency=10)}


def test_poller_reads_every_node_of_a_real_agent(sim_agents):
    agents = sim_agents(nodes=3, gpus=4)
    targets = [poller.AgentTarget(i, url, agents.token) for i, url in enumerate(agents.urls)]
    results = _poll(targets)
    assert all(r.ok for r in results.values()), results
    hostnames = {r.snapshot["hostname"] for r in results.values()}
    assert len(hostnames) == 3
    for result in results.values():
        assert [g["index"] for g in result.snapshot["gpus"]] == [0, 1, 2, 3]


def test_wrong_token_is_a_failed_poll_with_the_agents_reason(sim_agents):
    agents = sim_agents(nodes=1)
    result = _poll([poller.AgentTarget(1, agents.urls[0], "wrong")])[1]
    assert not result.ok
    assert result.error.startswith("HTTP 401")


def test_closed_port_is_a_failed_poll():
    result = _poll([poller.AgentTarget(1, f"http://127.0.0.1:{procs.free_port()}", "t")])[1]
    assert not result.ok
    assert result.error


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("garbage", "not valid JSON"), ("shapeless", "no 'uuid'")],
)
def test_agent_answering_garbage_is_a_failed_poll(bad_server, mode, reason):
    result = _poll([poller.AgentTarget(1, bad_server(mode), "t")])[1]
    assert not result.ok
    assert reason in result.error


def test_hanging_agent_does_not_delay_the_others(sim_agents, bad_server):
    agents = sim_agents(nodes=2)
    targets = [
        poller.AgentTarget(1, bad_server("hang"), "t"),
        poller.AgentTarget(2, agents.urls[0], agents.token),
        poller.AgentTarget(3, agents.urls[1], agents.token),
    ]
    started = time.monotonic()
    results = _poll(targets, timeout=1.0)
    elapsed = time.monotonic() - started
    assert "timed out" in results[1].error
    assert results[2].ok and results[3].ok
    # The hung agent costs its own timeout, once; the others are not queued behind it.
    assert elapsed < 2.5
    assert results[2].duration_s < 0.5


@pytest.mark.parametrize(
    "snapshot",
    [[], {"gpus": None}, {"gpus": ["x"]}, {"gpus": [{"uuid": "GPU-1", "index": -1}]}],
)
def test_snapshot_validation_rejects_wrong_shapes(snapshot):
    with pytest.raises(poller.SnapshotError):
        poller.validate_snapshot(snapshot)


class _KeepAliveHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"gpus": [{"uuid": "GPU-1", "index": 0}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_connections_to_an_agent_are_kept_alive_from_one_cycle_to_the_next():
    accepted = []

    class CountingServer(ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self):
            request = super().get_request()
            accepted.append(request[1])
            return request

    server = CountingServer(("127.0.0.1", 0), _KeepAliveHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = poller.AgentTarget(1, f"http://127.0.0.1:{server.server_address[1]}", "t")
        for _ in range(3):
            assert _poll([target])[1].ok
    finally:
        server.shutdown()
        server.server_close()
    assert len(accepted) == 1


class _SlowBodyHandler(BaseHTTPRequestHandler):
    """Sends a snapshot in pieces with pauses, as a loaded network would."""

    def do_GET(self) -> None:
        gpus = [{"uuid": f"GPU-{i}", "index": i, "name": "x" * 500} for i in range(64)]
        body = orjson.dumps({"gpus": gpus})
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for start in range(0, len(body), 4096):
            self.wfile.write(body[start : start + 4096])
            self.wfile.flush()
            time.sleep(0.01)

    def log_message(self, *args) -> None:
        pass


def test_a_snapshot_arriving_in_pieces_is_read_whole():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowBodyHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = _poll([poller.AgentTarget(1, f"http://127.0.0.1:{server.server_address[1]}", "t")])
    finally:
        server.shutdown()
        server.server_close()
    assert result[1].ok, result[1].error
    assert len(result[1].snapshot["gpus"]) == 64
