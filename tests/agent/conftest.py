"""Fixtures for the node agent tests: real agent processes and a plain HTTP client.

Nothing here touches Django; the agent must run on nodes without the portal.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(
    r"^gpu-agent listening on (?P<url>http://\S+) node=(?P<node>\S+) "
    r"backend=(?P<backend>\S+) gpus=(?P<gpus>\d+|\?)$"  # ? before a first good read
)
START_TIMEOUT_S = 15.0

# The in-process tests import agents.gpu_agent. Under the full suite tests/conftest.py puts
# the repo root on sys.path; when these tests run alone (--confcutdir=tests/agent, no Django
# services needed) nothing else does, and the repo is not necessarily pip-installed.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

# dcgm-exporter's reference data, or a skip saying how to get it (tests/anchors.py).
from tests import procs  # noqa: E402 (not Django: start and stop processes, free ports)
from tests.anchors import anchors_dir  # noqa: E402, F401


@dataclass
class HttpResult:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class AgentProcess:
    proc: subprocess.Popen[str]
    urls: list[str]
    nodes: list[str]
    lines: list[str]
    stderr_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def stderr(self) -> str:
        return self.stderr_path.read_text()


def http_get(
    url: str,
    token: str | None = None,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
) -> HttpResult:
    """One request; HTTP errors come back as results, never as exceptions."""
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})  # noqa: S310
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return HttpResult(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as error:
        with error:
            return HttpResult(error.code, dict(error.headers), error.read())


def free_port_block(count: int) -> int:
    """A base port with ``count`` consecutive free ports, outside the ephemeral range."""
    return procs.free_ports(count)


def agent_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT)
    env.pop("GPU_AGENT_TOKEN", None)
    return env


def _launch(args: list[str], nodes: int, stderr_path: Path) -> AgentProcess:
    base = free_port_block(nodes)
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agents.gpu_agent", *args, "--listen", f"127.0.0.1:{base}"],
            cwd=REPO_ROOT,
            env=agent_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    agent = AgentProcess(proc, [], [], [], stderr_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(agent.urls) < nodes:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        agent.lines.append(line)
        if match := LISTENING.match(line):
            agent.urls.append(match["url"])
            agent.nodes.append(match["node"])
    return agent


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    """Start ``python -m agents.gpu_agent ARGS --listen 127.0.0.1:<free block>``.

    Waits for one "listening" line per node; retries on a port race; stops the
    process at teardown whatever the test did.
    """
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, nodes: int = 1) -> AgentProcess:
        for attempt in range(3):
            agent = _launch(list(args), nodes, tmp_path / f"agent-{len(started)}-{attempt}.log")
            started.append(agent.proc)
            if len(agent.urls) == nodes:
                return agent
            stop(agent.proc)
            if "cannot listen" not in agent.stderr():
                break
        raise AssertionError(f"agent did not start: {agent.lines!r}\n{agent.stderr()}")

    yield start
    for proc in started:
        stop(proc)


@pytest.fixture
def get() -> Callable[..., HttpResult]:
    """``get(url, token=None, method="GET", headers=None)``: status, headers, body; never raises."""
    return http_get


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_python(*args)``: the test interpreter in the repo root, output captured."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=REPO_ROOT, env=agent_env(), capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    return run


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """``serve(node, token)``: the agent's server for a node (a ``Collector``) in this
    process, on a free port, in a loop thread of its own; returns its URL."""
    from agents.gpu_agent.server import AgentProtocol, Site

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    servers: list[asyncio.Server] = []
    connections: set[AgentProtocol] = set()

    def start(node: Any, token: str | None, metrics_auth: bool = False) -> str:
        site = Site(node, token, metrics_auth)

        async def listen() -> asyncio.Server:
            return await loop.create_server(
                lambda: AgentProtocol(site, connections), "127.0.0.1", 0
            )

        server = asyncio.run_coroutine_threadsafe(listen(), loop).result(5)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start

    async def close() -> None:
        for server in servers:
            server.close()
        for connection in list(connections):
            connection.close()

    asyncio.run_coroutine_threadsafe(close(), loop).result(5)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()
