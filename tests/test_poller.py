"""The poller against real agents and real misbehaving HTTP servers on loopback."""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from agents.gpu_agent import schema
from telemetry import poller
from tests import procs


class _Handler(BaseHTTPRequestHandler):
    mode = "garbage"

    def do_GET(self) -> None:
        if self.mode == "hang":
            time.sleep(30)
            return
        body = {
            "garbage": b"<html>not json",
            "shapeless": b'{"gpus": [{"index": 0}]}',
            "wrong-type": b'{"gpus": [{"uuid": "GPU-1", "index": 0, "temperature_c": "hot"}]}',
        }[self.mode]
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
        url, server = procs.serve(handler)
        servers.append(server)
        return url

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
    [
        ("garbage", "not valid JSON"),
        ("shapeless", "'uuid' is missing"),
        ("wrong-type", "'temperature_c' is not an integer"),
    ],
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
    [
        [],
        {"gpus": None},
        {"gpus": ["x"]},
        {"gpus": [{"uuid": "GPU-1", "index": -1}]},
        {"gpus": [{"uuid": "GPU-1", "index": 0, "utilization_gpu_pct": "50"}]},
        {"gpus": [{"uuid": "GPU-1", "index": 0, "power_w": True}]},
        {"gpus": [{"uuid": "GPU-1", "index": 0, "name": ["A100"]}]},
        {"gpus": [{"uuid": "GPU-1", "index": 0, "processes": "python"}]},
        {"gpus": [{"uuid": "GPU-1", "index": 0, "processes": [1]}]},
    ],
)
def test_snapshot_validation_rejects_wrong_shapes_and_types(snapshot):
    with pytest.raises(schema.SnapshotError):
        schema.check_snapshot(snapshot)


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
        gpus = [{"uuid": f"GPU-{i}", "index": i, "name": "x" * 120} for i in range(256)]
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
    assert len(result[1].snapshot["gpus"]) == 256


class _RecordingHandler(BaseHTTPRequestHandler):
    """Answers a snapshot; 503 ("no collection yet") to the first ``busy`` requests."""

    protocol_version = "HTTP/1.1"
    paths: list[str]
    busy = 0
    length = None

    def do_GET(self) -> None:
        self.paths.append(self.path)
        if len(self.paths) <= self.busy:
            status, body = 503, b'{"error": "no collection has completed yet"}'
        else:
            status, body = 200, b'{"gpus": [{"uuid": "GPU-1", "index": 0}]}'
        self.send_response(status)
        self.send_header("Content-Length", str(self.length or len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recording_server() -> Iterator:
    servers = []

    def start(**attributes) -> tuple[str, list[str]]:
        paths: list[str] = []
        handler = type("Handler", (_RecordingHandler,), {"paths": paths, **attributes})
        url, server = procs.serve(handler)
        servers.append(server)
        return url, paths

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_poller_asks_for_the_portal_view_below_the_agent_url(recording_server):
    url, paths = recording_server()
    results = _poll([poller.AgentTarget(1, url, "t"), poller.AgentTarget(2, url + "/gpu/", "t")])
    assert results[1].ok and results[2].ok
    assert sorted(paths) == ["/gpu/v1/snapshot?view=portal", "/v1/snapshot?view=portal"]


def test_agent_without_a_collection_yet_is_asked_again(recording_server, settings):
    settings.GPU_POLL_RETRIES = 2
    settings.GPU_POLL_RETRY_BACKOFF = 0.05
    url, paths = recording_server(busy=1)
    result = _poll([poller.AgentTarget(1, url, "t")])[1]
    assert result.ok, result.error
    assert result.attempts == 2
    assert len(paths) == 2


def test_agent_still_without_a_collection_after_the_retries_is_a_503(recording_server, settings):
    settings.GPU_POLL_RETRIES = 1
    settings.GPU_POLL_RETRY_BACKOFF = 0.05
    url, _ = recording_server(busy=5)
    result = _poll([poller.AgentTarget(1, url, "t")])[1]
    assert result.error.startswith("HTTP 503: ") and "no collection" in result.error
    assert result.attempts == 2


def test_closed_port_is_tried_again_then_fails_with_the_refusal(settings):
    settings.GPU_POLL_RETRIES = 2
    settings.GPU_POLL_RETRY_BACKOFF = 0.05
    started = time.monotonic()
    result = _poll([poller.AgentTarget(1, f"http://127.0.0.1:{procs.free_port()}", "t")])[1]
    assert not result.ok
    assert "refused" in result.error
    assert result.attempts == 3
    assert time.monotonic() - started < 1.5


def test_snapshot_announced_over_4_mib_is_refused(recording_server):
    url, _ = recording_server(length=5 * 1024 * 1024)
    result = _poll([poller.AgentTarget(1, url, "t")])[1]
    assert result.error.startswith("answer body larger than 4 MiB"), result.error


class _TinyAgent(asyncio.Protocol):
    """A keep-alive agent answering every request with its own one-card snapshot."""

    def __init__(self, answer: bytes, transports: list[asyncio.BaseTransport]) -> None:
        self.answer = answer
        self.transports = transports
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.transports.append(transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            _, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            self.transport.write(self.answer)


@pytest.fixture
def many_agents() -> Iterator[list[str]]:
    """200 agents on ports the system picks, served by one event loop in a thread.

    (The simulator needs 200 consecutive free ports, which a busy test machine, its
    ephemeral range dotted with TIME_WAIT sockets, often does not have.)
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    transports: list[asyncio.BaseTransport] = []

    async def start() -> list[asyncio.Server]:
        servers = []
        for i in range(200):
            gpus = [{"uuid": f"GPU-{i}", "index": 0}]
            body = orjson.dumps({"hostname": f"node-{i}", "gpus": gpus})
            answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            agent = functools.partial(_TinyAgent, answer, transports)
            servers.append(await loop.create_server(agent, "127.0.0.1", 0))
        return servers

    servers = asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    yield [f"http://127.0.0.1:{s.sockets[0].getsockname()[1]}" for s in servers]

    async def stop() -> None:
        for server in servers:
            server.close()
        for transport in transports:
            transport.close()
        await asyncio.sleep(0)

    asyncio.run_coroutine_threadsafe(stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_many_agents_are_all_answered_in_one_call(many_agents):
    targets = [poller.AgentTarget(i, url, "t") for i, url in enumerate(many_agents)]
    for _ in range(2):  # connecting, then on kept-alive connections
        results = poller.poll(targets, timeout=10.0, concurrency=10)
        assert [r.node_id for r in results] == list(range(200))
        assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
        assert [r.snapshot["hostname"] for r in results] == [f"node-{i}" for i in range(200)]


def test_fetch_all_with_its_own_pool_as_the_connection_test_uses_it(sim_agents):
    agents = sim_agents(nodes=1)
    target = poller.AgentTarget(0, agents.urls[0], agents.token)
    [result] = asyncio.run(poller.fetch_all([target], timeout=2.0, concurrency=1))
    assert result.ok, result.error


class _SlowHandler(_KeepAliveHandler):
    """Counts the requests it gets and answers each after half a second."""

    requests = 0
    lock = threading.Lock()
    two_in = threading.Event()

    def do_GET(self) -> None:
        with self.lock:
            type(self).requests += 1
            if type(self).requests == 2:
                type(self).two_in.set()
        time.sleep(0.5)
        super().do_GET()


def test_an_interrupted_poll_stops_its_batch_too():
    """A Celery soft time limit or a signal raised in the caller must not leave the batch
    running beside the next poll, with its own share of requests in flight."""
    import os
    import signal

    class Interrupted(Exception):
        pass

    handler = type("Slow", (_SlowHandler,), {"requests": 0, "two_in": threading.Event()})
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for _ in range(6)]
    for server in servers:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    targets = [
        poller.AgentTarget(i, f"http://127.0.0.1:{s.server_address[1]}", "t")
        for i, s in enumerate(servers)
    ]
    at_interrupt = []

    def interrupt(*args):
        at_interrupt.append(handler.requests)
        raise Interrupted

    def interrupt_once_two_are_in_flight():
        # Not a fixed timer: on a loaded machine the first requests may not be out by then.
        if handler.two_in.wait(10):
            os.kill(os.getpid(), signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        threading.Thread(target=interrupt_once_two_are_in_flight, daemon=True).start()
        with pytest.raises(Interrupted):
            poller.poll(targets, timeout=5, concurrency=2)
        assert at_interrupt == [2]
        # The first two requests were in flight; the other four must never be sent.
        results = poller.poll(targets[:1], timeout=5, concurrency=2)
        assert results[0].ok
        time.sleep(1.2)  # what the abandoned batch would have sent by now
        assert handler.requests == 3, handler.requests
    finally:
        signal.signal(signal.SIGALRM, previous)
        for server in servers:
            server.shutdown()
            server.server_close()
