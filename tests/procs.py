"""Start and stop the real processes the tests talk to (agents, daphne, Celery)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
BIN = Path(PYTHON).parent


# Ports for the children the tests start. The kernel's own choice (bind to port 0) lies in
# the ephemeral range, where any outgoing connection may take it between our check and the
# child's bind; ports outside that range are only ever taken by a bind, so a check that
# binds is good until a child binds. Random (from the OS, not the `random` module a test may
# seed) so that two runs on one machine rarely pick the same ones.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Where /proc cannot say: Linux's default starts at 32768, the IANA range (BSD, macOS) at
# 49152; from 32768 up covers both.
EPHEMERAL_FALLBACK = (32768, 65535)
# Below this are the ports local services like to use (PostgreSQL, Redis, 8000, 8080, ...).
LOWEST_PORT = 10000
_random = random.SystemRandom()
_handed_out: set[int] = set()  # not handed out twice by one process, bound yet or not


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' ports, first and last included."""
    try:
        low, high = (int(part) for part in path.read_text().split())
    except (OSError, ValueError):
        return EPHEMERAL_FALLBACK
    return (low, high) if 0 < low <= high <= 65535 else EPHEMERAL_FALLBACK


def port_ranges(ephemeral: tuple[int, int] | None = None) -> list[range]:
    """The ports tests may listen on: from LOWEST_PORT up, outside the ephemeral range (all
    of them from LOWEST_PORT up where that range leaves none: the old hazard, not a halt)."""
    low, high = ephemeral or ephemeral_range()
    below = range(LOWEST_PORT, max(LOWEST_PORT, low))
    above = range(max(LOWEST_PORT, high + 1), 65536)
    return [r for r in (below, above) if len(r)] or [range(LOWEST_PORT, 65536)]


def worker_share(
    ranges: list[range], worker: str | None = None, workers: str | None = None
) -> list[range]:
    """Under pytest-xdist, this worker's own slice of each range: gwN takes the N-th of
    PYTEST_XDIST_WORKER_COUNT equal slices. Each process remembers only the ports it handed
    out itself, so two workers drawing from one range could pick the same port before
    either child binds it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "") if workers is None else workers
    if not worker.startswith("gw") or not workers.isdigit() or int(workers) < 2:
        return ranges
    index, count = int(worker[2:]), int(workers)
    return [r[len(r) * index // count : len(r) * (index + 1) // count] for r in ranges]


def _bindable(first: int, count: int) -> bool:
    socks: list[socket.socket] = []
    try:
        for port in range(first, first + count):
            sock = socket.socket()
            socks.append(sock)
            sock.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        for sock in socks:
            sock.close()


def free_ports(count: int, *, ranges: list[range] | None = None) -> int:
    """The first of ``count`` consecutive free loopback ports (agents serve nodes on a
    range), outside the ephemeral range, in this xdist worker's share of it."""
    starts = [range(r.start, r.stop - count + 1) for r in ranges or worker_share(port_ranges())]
    starts = [r for r in starts if len(r)]
    for _ in range(200 if starts else 0):
        where = _random.choices(starts, weights=[len(r) for r in starts])[0]
        first = _random.choice(where)
        block = set(range(first, first + count))
        if block & _handed_out or not _bindable(first, count):
            continue
        _handed_out.update(block)
        return first
    raise RuntimeError(f"no {count} consecutive free ports outside the ephemeral range")


def free_port() -> int:
    """A free loopback port outside the ephemeral range."""
    return free_ports(1)


@dataclass
class Proc:
    """A child process whose output is collected line by line in the background."""

    name: str
    popen: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue = field(default_factory=queue.Queue)

    def wait_for(self, needle: str, *, count: int = 1, timeout: float = 30) -> list[str]:
        deadline = time.monotonic() + timeout
        found = [line for line in self.lines if needle in line]
        while len(found) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.popen.poll() is not None and self._queue.empty()):
                raise AssertionError(
                    f"{self.name}: {needle!r} x{count} not seen (exit={self.popen.poll()});"
                    f" output:\n" + "".join(self.lines[-40:])
                )
            try:
                line = self._queue.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue
            if needle in line:
                found.append(line)
        return found

    def stop(self, timeout: float = 10) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


def start(
    name: str, command: Sequence[str], env: dict[str, str] | None = None, *,
    session: bool = False,
) -> Proc:  # fmt: skip
    """``session``: in a process group of its own, so that a test can kill the child and
    every process it forked at once (``os.killpg``), as a host or container dies."""
    popen = subprocess.Popen(
        list(command),
        cwd=REPO,
        env=env if env is not None else os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=session,
    )
    proc = Proc(name, popen)

    def pump() -> None:
        for line in popen.stdout:
            proc.lines.append(line)
            proc._queue.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc


def start_celery_worker(
    env: dict[str, str], name: str, *extra: str, pool: str = "solo", wait: bool = True,
    session: bool = False,
) -> Proc:  # fmt: skip
    """A real Celery worker (solo pool unless ``pool``) on the configured broker; waits
    until it is ready unless not ``wait``. ``extra``: more worker options (``--include
    tests.celery_probe``); ``session``: as for ``start``."""
    worker = start(
        f"celery-worker-{name}",
        [str(BIN / "celery"), "-A", "portal", "worker", "--pool", pool, "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat",
         "--hostname", f"{name}@%h", *extra],
        env,
        session=session,
    )  # fmt: skip
    if wait:
        worker.wait_for("ready.", timeout=60)
    return worker


@contextlib.contextmanager
def celery_worker(
    env: dict[str, str], name: str, *extra: str, pool: str = "solo"
) -> Iterator[Proc]:
    """``start_celery_worker`` for a ``with`` block: stopped when it ends, however."""
    worker = start_celery_worker(env, name, *extra, pool=pool)
    try:
        yield worker
    finally:
        worker.stop()


def database_url(db: dict) -> str:
    """A DATABASE_URL for child processes that points at the test database."""
    user = quote(db.get("USER") or "")
    password = quote(db.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else f"{user}@" if user else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{db['NAME']}"


def child_env(**overrides: str | None) -> dict[str, str]:
    env = os.environ.copy()
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def embedded_env(var_dir: Path, **overrides: str | None) -> dict[str, str]:
    """Environment for a child on the embedded default (README command 1): nothing
    configured, its own folder, and its own PostgreSQL port so that runs never meet."""
    return child_env(
        DATABASE_URL=None, REDIS_URL=None, SECRET_KEY=None, PORTAL_VAR_DIR=str(var_dir),
        EMBEDDED_DB_PORT=str(free_port()), **overrides,
    )  # fmt: skip


def wait_http(url: str, *, timeout: float = 60, proc: Proc | None = None) -> None:
    """Wait until ``url`` answers 200 (a server is up), or fail with its output."""
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 (loopback)
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.2)
    output = "".join(proc.lines[-40:]) if proc else ""
    raise AssertionError(f"{url} did not answer within {timeout} s\n{output}")


@contextlib.contextmanager
def daphne(env: dict[str, str]) -> Iterator[tuple[str, Proc]]:
    """The portal's web server alone on a free loopback port, up (``/healthz``) until the
    block ends; yields its base URL (``http://127.0.0.1:<port>``) and the process."""
    port = free_port()
    command = [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"]
    proc = start("daphne", command, env)
    try:
        url = f"http://127.0.0.1:{port}"
        # Django's start-up alone took over a minute on the 2-core machine under a parallel run.
        wait_http(f"{url}/healthz", timeout=180, proc=proc)
        yield url, proc
    finally:
        proc.stop()


def serve(handler: type) -> tuple[str, ThreadingHTTPServer]:
    """A threaded HTTP server for ``handler`` (a BaseHTTPRequestHandler) on a free loopback
    port: its base URL and the server, to ``shutdown()`` and ``server_close()`` when done."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server


def run_python(script: str, env: dict[str, str], timeout: float = 120) -> Any:
    """Run ``script`` in a child Python from the repository; the JSON its last line prints."""
    result = subprocess.run(
        [PYTHON, "-c", script], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


PROMETHEUS = os.environ.get("PROMETHEUS_PATH", "/usr/bin/prometheus")


def unavailable(message: str) -> NoReturn:
    """A service or tool a test needs is missing: a skip saying so on a developer's
    machine, a failure where ``CI`` is set (there a missing service is red)."""
    import pytest

    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(f"{message}; CI is set, so this is a failure")
    pytest.skip(message)


def start_prometheus(
    tmp: Path, jobs: dict[str, list[str]], *, metrics_path: str = "/metrics"
) -> tuple[Proc, str]:
    """The real Prometheus scraping ``{job: [host:port, ...]}`` every second; waits until ready."""
    import json

    if not Path(PROMETHEUS).is_file():
        raise AssertionError(
            f"Prometheus not found at {PROMETHEUS}: install Debian's prometheus package "
            "(./dev test does) or set PROMETHEUS_PATH"
        )
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": job, "metrics_path": metrics_path,
             "static_configs": [{"targets": addresses}]}
            for job, addresses in jobs.items()
        ],
    }  # fmt: skip
    # JSON is YAML: no YAML writer needed.
    (tmp / "prometheus.yml").write_text(json.dumps(config))
    proc = start(
        "prometheus",
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'prometheus-data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/-/ready", timeout=30, proc=proc)
    return proc, url


def instant_query(url: str, query: str) -> list[dict]:
    """Evaluate PromQL through Prometheus's HTTP API; the result vector."""
    import json
    import urllib.parse
    import urllib.request

    address = f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    with urllib.request.urlopen(address, timeout=5) as response:  # noqa: S310 (loopback)
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]["result"]
