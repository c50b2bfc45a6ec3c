"""Start and stop the real processes the tests talk to (agents, daphne, Celery)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
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
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
BIN = Path(PYTHON).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports (agents serve nodes on a range)."""
    for _ in range(50):
        first = free_port()
        try:
            socks = []
            for port in range(first, first + count):
                sock = socket.socket()
                sock.bind(("127.0.0.1", port))
                socks.append(sock)
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports")


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


def start(name: str, command: Sequence[str], env: dict[str, str] | None = None) -> Proc:
    popen = subprocess.Popen(
        list(command),
        cwd=REPO,
        env=env if env is not None else os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    proc = Proc(name, popen)

    def pump() -> None:
        for line in popen.stdout:
            proc.lines.append(line)
            proc._queue.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return proc


def start_celery_worker(env: dict[str, str], name: str) -> Proc:
    """A real Celery worker (solo pool) on the configured broker; waits until it is ready."""
    worker = start(
        f"celery-worker-{name}",
        [str(BIN / "celery"), "-A", "portal", "worker", "--pool", "solo", "--loglevel", "INFO",
         "--without-gossip", "--without-mingle", "--without-heartbeat",
         "--hostname", f"{name}@%h"],
        env,
    )  # fmt: skip
    worker.wait_for("ready.", timeout=60)
    return worker


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
        wait_http(f"{url}/healthz", proc=proc)
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
