"""bench/ingest: one poll cycle for a fleet of simulated nodes, every stage counted.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.ingest --nodes 1000

One simulator process serves the virtual nodes; this process polls them the way a
Celery worker does (``services.poll_fleet``: fetch, parse, inventory, latest readings,
rollup buffer, live push) every ``--interval`` seconds, flushes the minute rollups as
beat would, and reports wall time, CPU of this process, of its PostgreSQL backend and
of Redis, and rows written. With ``--prometheus`` a real Prometheus scrapes the same
fleet at the same interval, and its CPU per cycle is reported beside ours.
The database named in DATABASE_URL is migrated and emptied: use a scratch one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu_s(pid: int) -> float:
    """CPU of a process and its live descendants (a Celery prefork worker's children)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += proc_cpu_s(current)
        except OSError:
            continue
        todo.extend(children.get(current, []))
    return total


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def production_stack(bench: str):
    """Django set up on PostgreSQL and Redis (refusing the in-process one), migrated, with
    no nodes and an empty Redis database; returns a Redis client for that database."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    import redis
    from django.conf import settings

    from agents.models import Node

    if not settings.REDIS_URL:
        raise SystemExit(f"{bench} measures the production stack: set DATABASE_URL and REDIS_URL")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    Node.objects.all().delete()
    from django.core.cache import cache

    cache.clear()
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    return client


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_simulator(nodes: int, gpus: int, first_port: int, interval: float) -> subprocess.Popen:
    command = [
        sys.executable, "-m", "agents.gpu_agent", "--backend", "sim", "--nodes", str(nodes),
        "--gpus", str(gpus), "--interval", str(interval), "--hostname", "bench",
        "--listen", f"127.0.0.1:{first_port}", "--log-level", "WARNING",
    ]  # fmt: skip
    env = {**os.environ, "GPU_AGENT_TOKEN": "bench-token"}
    agent = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    seen = 0
    deadline = time.monotonic() + 120
    for line in agent.stdout:
        seen += line.startswith("gpu-agent listening on")
        if seen == nodes or time.monotonic() > deadline:
            break
    if seen < nodes:
        agent.kill()
        raise SystemExit(f"simulator started only {seen}/{nodes} nodes")
    return agent


def start_prometheus(tmp: Path, nodes: int, first_port: int, interval: float) -> subprocess.Popen:
    targets = [f"127.0.0.1:{first_port + i}" for i in range(nodes)]
    config = {
        "global": {"scrape_interval": f"{interval:g}s", "scrape_timeout": f"{interval:g}s"},
        "scrape_configs": [{"job_name": "gpu-agent", "static_configs": [{"targets": targets}]}],
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))
    port = first_port + nodes + 10
    return subprocess.Popen(
        [os.environ.get("PROMETHEUS_PATH", "/usr/bin/prometheus"),
         f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--first-port", type=int, default=21000)
    parser.add_argument("--prometheus", action="store_true", help="also run a real Prometheus")
    parser.add_argument(
        "--redis-server",
        help="start this redis-server for the run and use it (REDIS_URL's db number kept): "
        "a shared server's CPU counts everyone's commands",
    )
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--profile", help="cProfile the measured cycles into this pstats file")
    parser.add_argument(
        "--curve", help="comma-separated node counts: one run of each, in its own process"
    )
    args = parser.parse_args(argv)
    if args.curve:
        return curve(args, argv if argv is not None else sys.argv[1:])

    own_redis = start_redis(args.redis_server, args.first_port - 1) if args.redis_server else None
    try:
        return measure(args, own_redis)
    finally:
        if own_redis is not None:
            own_redis.terminate()
            own_redis.wait(10)


def start_redis(path: str, port: int) -> subprocess.Popen:
    """A redis-server of the run's own on ``port``, with REDIS_URL pointed at it."""
    from urllib.parse import urlsplit

    server = subprocess.Popen(
        [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    db = urlsplit(os.environ.get("REDIS_URL", "")).path.lstrip("/") or "0"
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/{db}"
    for _ in range(100):  # up within a second or so
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return server
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit(f"{path} did not start on port {port}")


def measure(args: argparse.Namespace, own_redis: subprocess.Popen | None) -> int:
    redis_client = production_stack("bench/ingest")
    from django.db import connection
    from django.utils import timezone

    from agents.models import GPU, Node
    from bench.ingest import stages
    from telemetry import poller, rollups, services
    from telemetry.models import GpuMinute

    timers = stages.Timers()
    timers.install(self_cpu_s)

    gpu_count = args.nodes * args.gpus
    agent = start_simulator(args.nodes, args.gpus, args.first_port, args.interval)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    prometheus = (
        start_prometheus(tmp, args.nodes, args.first_port, args.interval)
        if args.prometheus
        else None
    )
    try:
        Node.objects.bulk_create(
            Node(name=f"bench-{i:04d}", agent_url=f"http://127.0.0.1:{args.first_port + i}",
                 agent_token="bench-token")
            for i in range(args.nodes)
        )  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend_pid = cursor.fetchone()[0]
        services.poll_fleet()  # first cycle creates the GPUs: not part of the steady state
        assert GPU.objects.count() == gpu_count, GPU.objects.count()

        def rows_written() -> dict[str, int]:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del FROM pg_stat_user_tables "
                    "WHERE relname LIKE 'agents_%%'"
                )
                return dict(cursor.fetchall())

        # The measured cycles start just after a minute boundary, once the warm-up's
        # minute is flushed (not counted): their flush then holds their samples and
        # nothing else, and with 12 cycles of 5 s it is one full minute, as in production.
        time.sleep(60.5 - time.time() % 60)
        rollups.flush(timezone.now())
        time.sleep(max(0.0, 1.0 - time.time() % 60))  # statistics catch up; still in the minute
        rows_before = rows_written()
        # Whole-run totals too: CPU spent between cycles (a deferred garbage collection,
        # the poller's idle loop) belongs to the cycles as much as what runs inside them.
        run_cpu0, run_pg0 = self_cpu_s(), proc_cpu_s(backend_pid)
        run_redis0 = redis_client.info("cpu")
        # Prometheus is measured over the same window, as CPU per scrape interval.
        run_started = time.monotonic()
        prom_cpu0 = proc_cpu_s(prometheus.pid) if prometheus is not None else 0.0
        cycles = []
        timers.reset()
        load_before = os.getloadavg()
        profile = stages.profiled(args.profile, poller._loop.loop if poller._loop else None)
        profile.__enter__()
        for _ in range(args.cycles):
            started = time.monotonic()
            cpu0, pg0 = self_cpu_s(), proc_cpu_s(backend_pid)
            redis0 = redis_client.info("cpu")
            summary = services.poll_fleet()
            wall = time.monotonic() - started
            redis1 = redis_client.info("cpu")
            cycles.append({
                "wall_s": wall,
                "cpu_s": self_cpu_s() - cpu0,
                "pg_cpu_s": proc_cpu_s(backend_pid) - pg0,
                "redis_cpu_s": (redis1["used_cpu_user"] + redis1["used_cpu_sys"])
                - (redis0["used_cpu_user"] + redis0["used_cpu_sys"]),
                "answered": summary.answered,
            })  # fmt: skip
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))

        profile.__exit__(None, None, None)
        run_redis1 = redis_client.info("cpu")
        load_after = os.getloadavg()
        if prometheus is not None:
            prom_cpu = proc_cpu_s(prometheus.pid) - prom_cpu0
            prom_window_s = time.monotonic() - run_started
        run = {
            "cpu_s": self_cpu_s() - run_cpu0,
            "pg_cpu_s": proc_cpu_s(backend_pid) - run_pg0,
            "redis_cpu_s": (run_redis1["used_cpu_user"] + run_redis1["used_cpu_sys"])
            - (run_redis0["used_cpu_user"] + run_redis0["used_cpu_sys"]),
        }
        time.sleep(1)
        rows_after = rows_written()
        # Beat flushes each finished minute once; its cost is shared by the cycles whose
        # samples it holds: exactly the measured ones.
        cpu0, pg0, started = self_cpu_s(), proc_cpu_s(backend_pid), time.monotonic()
        written = rollups.flush(timezone.now() + timedelta(minutes=2))
        flush = {"wall_s": time.monotonic() - started, "cpu_s": self_cpu_s() - cpu0,
                 "pg_cpu_s": proc_cpu_s(backend_pid) - pg0, "gpu_minutes": written,
                 "rows": GpuMinute.objects.count()}  # fmt: skip
    finally:
        agent_cpu = proc_cpu_s(agent.pid)
        agent.terminate()
        if prometheus is not None:
            prometheus.terminate()
        for proc in (agent, prometheus):
            if proc is not None:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()

    walls = [c["wall_s"] for c in cycles]
    per_cycle_cpu = [c["cpu_s"] + c["pg_cpu_s"] + c["redis_cpu_s"] for c in cycles]
    flush_share = (flush["cpu_s"] + flush["pg_cpu_s"]) / len(cycles)
    in_cycles = statistics.mean(per_cycle_cpu) + flush_share
    all_in = (run["cpu_s"] + run["pg_cpu_s"] + run["redis_cpu_s"]) / len(cycles) + flush_share
    result = {
        # os.getloadavg() as the measured cycles started and ended (1, 5, 15 minutes).
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "nodes": args.nodes,
        # Redis's CPU is the whole server's: only ours when the run started its own.
        "redis_server_own": own_redis is not None,
        "gpus": gpu_count,
        "cycles": len(cycles),
        "cycle_wall_p50_s": percentile(walls, 0.5),
        "cycle_wall_p95_s": percentile(walls, 0.95),
        "portal_cpu_per_cycle_s": statistics.mean(c["cpu_s"] for c in cycles),
        "postgres_cpu_per_cycle_s": statistics.mean(c["pg_cpu_s"] for c in cycles),
        "redis_cpu_per_cycle_s": statistics.mean(c["redis_cpu_s"] for c in cycles),
        "rollup_flush": flush,
        "whole_run_cpu_per_cycle_s": {k: v / len(cycles) for k, v in run.items()},
        "cpu_per_1000_gpu_samples_s": all_in / gpu_count * 1000,
        # All stages, whole run (between cycles included) plus the flush's share.
        "cpu_per_gpu_sample_us": all_in / gpu_count * 1e6,
        # The same, counting only the time inside the cycles.
        "cpu_per_gpu_sample_in_cycles_us": in_cycles / gpu_count * 1e6,
        # Inserted, updated or deleted rows per table (PostgreSQL's own statistics).
        "rows_written_per_cycle": {
            table.removeprefix("agents_"): round((rows_after[table] - rows_before.get(table, 0))
                                                 / len(cycles), 1)
            for table in rows_after if rows_after[table] != rows_before.get(table, 0)
        },
        "rollup_gpu_minutes_written": written,
        # The portal process's CPU per cycle by stage (bench/ingest/stages.py), in cycles.
        "stage_cpu_per_cycle_s": {k: round(v, 4) for k, v in timers.net(len(cycles)).items()},
        "simulator_cpu_s_total": agent_cpu,
        "answered_min": min(c["answered"] for c in cycles),
    }  # fmt: skip
    if prometheus is not None:
        # Prometheus scraped for the whole run (warm-up included): per interval elapsed.
        result["prometheus_cpu_per_cycle_s"] = prom_cpu / (prom_window_s / args.interval)
        result["prometheus_cpu_per_gpu_us"] = result["prometheus_cpu_per_cycle_s"] / gpu_count * 1e6
        # How many times cheaper than Prometheus per GPU sample, in this same run.
        result["prometheus_ratio"] = round(
            result["prometheus_cpu_per_gpu_us"] / result["cpu_per_gpu_sample_us"], 2
        )
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def curve(args: argparse.Namespace, argv: list[str]) -> int:
    """One run per fleet size, each in a process of its own (fresh pools, caches and
    ports), and the CPU per GPU sample against the smallest size's: 1.0 is linear."""
    sizes = [int(n) for n in args.curve.split(",")]
    passed = []
    skip = False
    for arg in argv:  # the other options, passed on as they were given
        if skip:
            skip = False
            continue
        if arg in ("--curve", "--nodes", "--json", "--profile"):
            skip = True
            continue
        if arg.startswith(("--curve=", "--nodes=", "--json=", "--profile=")):
            continue
        passed.append(arg)
    points = []
    for nodes in sizes:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [sys.executable, "-m", "bench.ingest", *passed, "--nodes", str(nodes),
                       "--json", out.name]  # fmt: skip
            subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
            points.append(json.loads(Path(out.name).read_text()))
    base = points[0]["cpu_per_gpu_sample_us"]
    result = {
        "curve": [
            {
                "nodes": p["nodes"],
                "gpus": p["gpus"],
                "loadavg_before": p["loadavg_before"],
                "cpu_per_gpu_sample_us": round(p["cpu_per_gpu_sample_us"], 1),
                # Per GPU sample against the smallest fleet's: 1.0 while the cost is linear.
                "vs_smallest": round(p["cpu_per_gpu_sample_us"] / base, 2),
                "cycle_wall_p50_s": round(p["cycle_wall_p50_s"], 3),
                "prometheus_cpu_per_gpu_us": round(p.get("prometheus_cpu_per_gpu_us", 0), 1),
                "prometheus_ratio": p.get("prometheus_ratio"),
                "stage_cpu_per_cycle_s": p["stage_cpu_per_cycle_s"],
            }
            for p in points
        ]
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
