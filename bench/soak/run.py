"""bench/soak: the production stack under steady load for a long time, every process's
memory sampled, every error counted, the rollups checked complete.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.soak

Issue #27's soak: 30 minutes (``--minutes``) at 8,000 simulated GPUs (``--nodes 1000
--gpus 8``) with 50 paced API clients (``--api-clients``, each a CI job's create, read,
read allocation, release every ``--pace`` seconds, bench/api's client) and 200 live-page
websocket clients (``--browsers`` on the fleet page, each reconnecting as the page does).
It runs what production runs: one simulator process, daphne, a Celery worker per queue (``polls``,
``deliveries``, ``celery``) and beat, polling every ``--interval`` seconds, on the
PostgreSQL and Redis of the settings (the database is emptied of nodes and requests: use a
scratch one).

Every ``--sample`` seconds it reads each process's resident memory (with its children);
at the end it prints JSON: per process the RSS at the start of the measured half and at
the end and the least-squares slope over the second half (MiB per 10 minutes: "flat" is a
slope within the noise of a few MiB), the API calls, errors and p50/p99, the websocket
clients that kept receiving, and the rollups: every card's minute rollup for every whole
minute of the run. Exit 1 on any error, a client that stopped receiving or a missing
rollup. Run by hand (docs/performance.md, docs/reliability.md), not in the suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.api.run import OPS, Client, setup, summary
from bench.ingest.run import REPO, production_stack, start_simulator
from bench.requests.run import empty_requests, simulated_nodes, start_daphne, stop

BIN = Path(sys.executable).parent
QUEUES = ("polls", "deliveries", "celery")


def tree_rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (a prefork worker's pool), MiB."""
    total = 0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        pids.extend(int(c) for c in children)
    return total / 1024


def slope_per_10min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MiB), in MiB per 10 minutes."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if not var:
        return None
    cov = sum((t - mean_t) * (m - mean_m) for t, m in points)
    return round(cov / var * 600, 2)


async def _browser(url: str, cookie: str, delay: float, stop_at: float) -> tuple[int, float, int]:
    """A live page's socket, which reconnects as the page does (static/js/live-socket.js:
    after 1, 2, 4 ... 30 s): (messages, seconds since its last one when the soak ended,
    times it connected again)."""
    import aiohttp

    await asyncio.sleep(delay)  # arriving over time, not in one burst
    origin = "http://" + url.split("/")[2]
    count, last, attempt, reconnects = 0, time.time(), 0, -1
    async with aiohttp.ClientSession(headers={"Cookie": cookie, "Origin": origin}) as session:
        while time.time() < stop_at:
            try:
                async with session.ws_connect(url, max_msg_size=0) as ws:
                    reconnects += 1
                    while time.time() < stop_at:
                        try:
                            message = await ws.receive(timeout=max(0.1, stop_at - time.time()))
                        except TimeoutError:
                            break
                        if message.type != aiohttp.WSMsgType.TEXT:
                            break
                        count, last, attempt = count + 1, time.time(), 0
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass
            if time.time() < stop_at:
                await asyncio.sleep(min(30, 2**attempt, max(0.0, stop_at - time.time())))
                attempt += 1
    return count, round(stop_at - last, 1), max(reconnects, 0)


def browsers(url: str, cookie: str, count: int, stop_at: float) -> list:
    async def run_all():
        return await asyncio.gather(
            *(_browser(url, cookie, i * 0.05, stop_at) for i in range(count)),
            return_exceptions=True,
        )

    return asyncio.run(run_all())


def session_cookie() -> str:
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    user, _ = get_user_model().objects.get_or_create(username="bench-soak", is_superuser=True)
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "tokens.backends.PortalModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    return f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def missing_rollups(started: datetime, ended: datetime) -> dict:
    """Every card's minute rollup for every whole minute between the first cycle and the
    last one beat has folded (the current minute is still open)."""
    from agents.models import GPU
    from telemetry.models import GpuMinute

    first = (started + timedelta(minutes=1)).replace(second=0, microsecond=0)
    last = ended.replace(second=0, microsecond=0) - timedelta(minutes=1)
    minutes = int((last - first).total_seconds() // 60) + 1
    cards = GPU.objects.count()
    found = GpuMinute.objects.filter(bucket__gte=first, bucket__lte=last).count()
    return {"minutes": max(minutes, 0), "cards": cards, "expected": max(minutes, 0) * cards,
            "found": found}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--api-clients", type=int, default=50)
    parser.add_argument("--pace", type=float, default=20.0, help="seconds between a client's jobs")
    parser.add_argument("--browsers", type=int, default=200)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--sample", type=float, default=30.0)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--first-port", type=int, default=26000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    production_stack("bench/soak")
    empty_requests()
    tmp = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    env = {**os.environ, "GPU_POLL_INTERVAL": str(args.interval), "LOG_LEVEL": "WARNING",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    loads_before = os.getloadavg()
    named: dict[str, subprocess.Popen] = {}
    agent = start_simulator(args.nodes, args.gpus, args.first_port, args.interval)
    named["simulator"] = agent
    try:
        simulated_nodes(args.nodes, args.gpus, args.first_port)
        keys, tenants, pool = setup(args.api_clients, args.tenants)
        cookie = session_cookie()
        port = args.first_port + args.nodes + 20
        named["daphne"] = start_daphne(port, env, tmp / "daphne.log")
        celery = str(BIN / "celery")
        for queue in QUEUES:
            named[f"worker-{queue}"] = subprocess.Popen(
                [celery, "-A", "portal", "worker", "-Q", queue, "--concurrency", "2",
                 "--hostname", f"{queue}@soak", "--loglevel", "WARNING"],
                cwd=REPO, env=env, stdout=(tmp / f"worker-{queue}.log").open("w"),
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        named["beat"] = subprocess.Popen(
            [celery, "-A", "portal", "beat", "--loglevel", "WARNING",
             "--schedule", str(tmp / "beat")],
            cwd=REPO, env=env, stdout=(tmp / "beat.log").open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        time.sleep(max(args.interval * 3, 20))  # the first cycles and desired-state sends
        started_at = datetime.now(UTC)
        started = time.monotonic()
        duration = args.minutes * 60
        deadline = started + duration
        stop_wall = time.time() + duration
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in named}
        clients = [Client(port, key, tenants[i % len(tenants)], pool, deadline, args.pace)
                   for i, key in enumerate(keys)]  # fmt: skip
        threads = [threading.Thread(target=c.run, daemon=True) for c in clients]
        received: list = []
        ws = threading.Thread(target=lambda: received.extend(
            browsers(f"ws://127.0.0.1:{port}/ws/fleet/", cookie, args.browsers, stop_wall)),
            daemon=True)  # fmt: skip
        for thread in [*threads, ws]:
            thread.start()
        while time.monotonic() < deadline:
            now = time.monotonic() - started
            for name, proc in named.items():
                if proc.poll() is None:
                    samples[name].append((now, tree_rss_mib(proc.pid)))
            print(json.dumps({"t_s": round(now), **{n: round(s[-1][1], 1) for n, s in
                              samples.items() if s}}), file=sys.stderr, flush=True)  # fmt: skip
            time.sleep(min(args.sample, max(0.0, deadline - time.monotonic())))
        for thread in [*threads, ws]:
            thread.join(timeout=120)
        wall = time.monotonic() - started
        time.sleep(70)  # beat folds the last whole minutes
        rollups = missing_rollups(started_at, datetime.now(UTC) - timedelta(seconds=70))
        died = {name: proc.returncode for name, proc in named.items() if proc.poll() is not None}
    finally:
        stop(list(named.values()))
    memory = {}
    for name, points in samples.items():
        half = [p for p in points if p[0] >= wall / 2]
        memory[name] = {
            "rss_mib_first": round(points[0][1], 1) if points else None,
            "rss_mib_half": round(half[0][1], 1) if half else None,
            "rss_mib_end": round(points[-1][1], 1) if points else None,
            "slope_mib_per_10min_second_half": slope_per_10min(half),
        }
    every = [t for c in clients for op in OPS for t in c.timings[op]]
    errors = [e for c in clients for e in c.errors]
    # Kept receiving: a push within the last three poll cycles of the end.
    kept = sum(1 for r in received if isinstance(r, tuple) and r[1] <= 3 * args.interval + 5)
    result = {
        "minutes": round(wall / 60, 1), "gpus": args.nodes * args.gpus,
        "api_clients": args.api_clients, "pace_s": args.pace, "browsers": args.browsers,
        "loadavg_before": [round(x, 2) for x in loads_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "memory": memory, "processes_died": died,
        "api": {"cycles": sum(c.cycles for c in clients), **summary(every),
                "by_call": {op: summary([t for c in clients for t in c.timings[op]])
                            for op in OPS},
                "errors": len(errors), "error_samples": errors[:5]},
        "browsers_that_kept_receiving": kept,
        "browser_messages": sum(r[0] for r in received if isinstance(r, tuple)),
        "browser_reconnects": sum(r[2] for r in received if isinstance(r, tuple)),
        "browsers_reconnected": sum(1 for r in received if isinstance(r, tuple) and r[2]),
        "browsers_failed": [repr(r) for r in received if not isinstance(r, tuple)][:5],
        "rollups": rollups, "logs": str(tmp),
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    bad = (errors or died or kept < args.browsers
           or rollups["found"] < rollups["expected"])  # fmt: skip
    return 1 if bad else 0
