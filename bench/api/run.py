"""bench/api: 50 concurrent CI clients for 2 minutes, each creating, reading and
releasing GPU requests through the REST API with its own token, while the poller polls a
simulated fleet.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.api

(Keep ``DATABASE_CONN_MAX_AGE`` at its default 0, or pool with ``DATABASE_POOL_SIZE``: with
persistent connections, daphne's one thread per concurrent request keeps one PostgreSQL
connection each; docs/performance.md.)

One simulator process serves the virtual nodes and a poller process polls them every
``--interval`` seconds (as bench/requests does); daphne serves the portal. Each client
is a thread with one keep-alive connection and a ``gpp_`` bearer token of its own, in
``--tenants`` teams with an auto-approve policy on one pool of every card; it repeats
what ``gpuctl run`` does: ``POST /api/v1/gpu-requests/`` (with an Idempotency-Key; within
policy, approved and placed in the same call), ``GET`` the request, ``GET`` its
allocation (the launch environment), ``POST .../release/``. Every call is timed; any
answer other than the expected status and state counts as an error. The database is
migrated and emptied of nodes, pools, tenants and requests: use a scratch one.

A Celery worker (``--pool solo``) runs beside them, as in production: each placement and
release queues a send of the node's desired state to its agent (``--no-worker``: none, the
sends pile up unsent). ``--pace S`` starts each client's cycle every S seconds instead of
back to back (a CI job runs between its calls; back to back is the saturation case, where
latency is the clients' queue for the CPU: docs/performance.md). ``--web N`` serves the
portal from N daphne processes, the clients spread over them as a load balancer would.
``--curve 12,25,50`` runs it once per client count and prints each run's figures (with
``os.getloadavg()`` before and after) as a JSON line: the scale curve.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

from bench.ingest.run import REPO, percentile, production_stack, start_simulator
from bench.requests.run import empty_requests, poller, simulated_nodes, start_daphne, stop

OPS = ("create", "read", "read_allocation", "release")


def setup(clients: int, tenants: int) -> tuple[list[str], list[int], int]:
    """A pool of every card; ``tenants`` teams each with room to spare and a policy that
    approves one small slice at once; one member with a token per client."""
    from django.contrib.auth import get_user_model

    from pools.models import Pool
    from pools.services import refresh_cards
    from quotas.choices import Role
    from quotas.models import Membership, Quota, Tenant
    from tokens.interface import issue

    users = get_user_model().objects
    users.filter(username__startswith="bench-").delete()
    pool = Pool.objects.create(name="bench", slug="bench")
    refresh_cards(pool)
    big = 10**9
    teams = []
    for t in range(tenants):
        tenant = Tenant.objects.create(name=f"bench-{t}", slug=f"bench-{t}")
        Quota.objects.create(
            tenant=tenant, pool=pool, limit_vgpus=big, limit_compute_pct=big,
            limit_memory_mib=big, limit_gpu_hours=0, escalate_after_hours=0,
            expire_pending_after_hours=0, auto_approve_vgpus=1, auto_approve_compute_pct=25,
            auto_approve_hours=8,
        )  # fmt: skip
        teams.append(tenant)
    keys = []
    for i in range(clients):
        user = users.create_user(f"bench-ci-{i}", password=None)
        Membership.objects.create(user=user, tenant=teams[i % tenants], role=Role.MEMBER)
        keys.append(issue(user, name="bench")[1])
    return keys, [team.pk for team in teams], pool.pk


class Client:
    """One CI client: a keep-alive connection, its token, its timings and errors."""

    def __init__(self, port: int, key: str, tenant: int, pool: int, deadline: float,
                 pace: float = 0.0):  # fmt: skip
        self.port, self.tenant, self.pool, self.deadline = port, tenant, pool, deadline
        self.pace = pace
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        self.timings: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.cycles = 0
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def call(self, op: str, method: str, path: str, body: dict | None, expect: int,
             headers: dict | None = None) -> dict | None:  # fmt: skip
        started = time.perf_counter()
        try:
            self.connection.request(method, path, body=json.dumps(body) if body else None,
                                    headers={**self.headers, **(headers or {})})  # fmt: skip
            response = self.connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.errors.append(f"{op}: {exc!r}")
            self.connection.close()
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            return None
        self.timings[op].append(time.perf_counter() - started)
        if response.status != expect:
            self.errors.append(f"{op}: HTTP {response.status} {raw[:200]!r}")
            return None
        return json.loads(raw)

    def run(self) -> None:
        url = "/api/v1/gpu-requests/"
        ask = {"tenant": self.tenant, "pool": self.pool, "count": 1, "compute_pct": 5,
               "memory_mib": 1024, "duration_hours": 1, "reason": "bench/api"}  # fmt: skip
        # Paced clients start at a random point of their period, as jobs do, not in step.
        next_cycle = time.monotonic() + random.uniform(0, self.pace)
        while next_cycle < self.deadline:
            time.sleep(max(0.0, next_cycle - time.monotonic()))
            next_cycle = max(next_cycle + self.pace, time.monotonic())
            key = {"Idempotency-Key": str(uuid.uuid4())}
            req = self.call("create", "POST", url, ask, 201, key)
            if req is None:
                continue
            if req["state"] != "allocated" or not req["allocations"]:
                self.errors.append(f"create: state {req['state']}")
            read = self.call("read", "GET", f"{url}{req['id']}/", None, 200)
            if read and read["allocations"]:
                where = f"/api/v1/allocations/{read['allocations'][0]['id']}/"
                alloc = self.call("read_allocation", "GET", where, None, 200)
                if alloc is not None and not alloc.get("launch_env"):
                    self.errors.append("read_allocation: no launch_env")
            released = self.call("release", "POST", f"{url}{req['id']}/release/", None, 200)
            if released is not None:
                if released["state"] != "released":
                    self.errors.append(f"release: state {released['state']}")
                self.cycles += 1
        self.connection.close()


def summary(times: list[float]) -> dict:
    if not times:
        return {"calls": 0}
    return {"calls": len(times), "p50_ms": round(percentile(times, 0.5) * 1000, 1),
            "p99_ms": round(percentile(times, 0.99) * 1000, 1),
            "max_ms": round(max(times) * 1000, 1)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=120, help="seconds of load")
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument(
        "--pace", type=float, default=0.0, metavar="S",
        help="each client starts a cycle every S seconds (a job's run between its calls); "
        "0: cycles back to back, the saturation case",
    )  # fmt: skip
    parser.add_argument("--no-worker", dest="worker", action="store_false",
                        help="no Celery worker: the agent syncs each placement queues pile "
                        "up unsent instead of running beside the web processes")  # fmt: skip
    parser.add_argument("--web", type=int, default=1, help="daphne processes, clients spread "
                        "over them as by a load balancer")  # fmt: skip
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--first-port", type=int, default=24000)
    parser.add_argument("--poller", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--curve", metavar="N,N,...",
                        help="a scale curve: one run per client count (each a fresh setup, "
                        "as a child process), one JSON line of figures per run")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--server-log", type=Path, help="daphne's output, for the errors")
    args = parser.parse_args(argv)
    if args.poller:
        poller(args.interval)
        return 0
    if args.curve:
        return curve(args, [int(n) for n in args.curve.split(",")])

    production_stack("bench/api")
    empty_requests()
    from quotas.choices import OPEN_STATES
    from quotas.models import GpuRequest

    load, loads = os.getloadavg()[0], os.getloadavg()
    agent = start_simulator(args.nodes, args.gpus, args.first_port, args.interval)
    children = [agent]
    try:
        simulated_nodes(args.nodes, args.gpus, args.first_port)
        keys, tenants, pool = setup(args.clients, args.tenants)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        children.append(subprocess.Popen(
            [sys.executable, "-m", "bench.api", "--poller", "--interval", str(args.interval)],
            cwd=REPO, env=env,
        ))  # fmt: skip
        if args.worker:  # sends each changed node its desired state, as in production
            children.append(subprocess.Popen(
                [str(Path(sys.executable).parent / "celery"), "-A", "portal", "worker",
                 "--pool", "solo", "--loglevel", "WARNING"],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            ))  # fmt: skip
        ports = [args.first_port + args.nodes + 10 + i for i in range(args.web)]
        for i, port in enumerate(ports):
            log = args.server_log
            if log and args.web > 1:
                log = log.with_name(f"{log.stem}-{i}{log.suffix}")
            children.append(start_daphne(port, env, log))
        time.sleep(args.interval)  # the poller is in its stride
        started = time.monotonic()
        clients = [Client(ports[i % len(ports)], key, tenants[i % len(tenants)], pool,
                          started + args.duration, args.pace)
                   for i, key in enumerate(keys)]  # fmt: skip
        threads = [threading.Thread(target=client.run) for client in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        left_open = GpuRequest.objects.filter(state__in=OPEN_STATES).count()
    finally:
        stop(children)
    every = [t for c in clients for op in OPS for t in c.timings[op]]
    errors = [e for c in clients for e in c.errors]
    result = {
        "clients": args.clients, "pace_s": args.pace, "web_processes": args.web,
        "celery_worker": args.worker,
        "tenants": args.tenants, "gpus": args.nodes * args.gpus,
        "poll_interval_s": args.interval, "duration_s": round(wall, 1),
        "load_avg_before": round(load, 1), "load_avg_after": round(os.getloadavg()[0], 1),
        # os.getloadavg(): the 1, 5 and 15 minute averages, before and after the run.
        "loadavg_before": [round(x, 2) for x in loads],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "calls": len(every), "calls_per_s": round(len(every) / wall, 1),
        "cycles": sum(c.cycles for c in clients),
        "cycles_per_s": round(sum(c.cycles for c in clients) / wall, 1),
        **{k: v for k, v in summary(every).items() if k != "calls"},
        "by_call": {op: summary([t for c in clients for t in c.timings[op]]) for op in OPS},
        "errors": len(errors), "error_samples": errors[:5], "left_open": left_open,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if not errors and not left_open else 1


CURVE_FIGURES = ("clients", "calls_per_s", "p50_ms", "p99_ms", "errors", "loadavg_before",
                 "loadavg_after")  # fmt: skip


def curve(args: argparse.Namespace, counts: list[int]) -> int:
    """Run the bench once per client count, the other options the same; print each run's
    figures (and each call's p50 / p99) as a JSON line, then the whole curve."""
    import tempfile

    points, failed = [], 0
    for n in counts:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            command = [
                sys.executable, "-m", "bench.api", "--clients", str(n),
                "--duration", str(args.duration), "--tenants", str(args.tenants),
                "--pace", str(args.pace), "--web", str(args.web), "--nodes", str(args.nodes),
                "--gpus", str(args.gpus), "--interval", str(args.interval),
                "--first-port", str(args.first_port), "--json", out.name,
                *([] if args.worker else ["--no-worker"]),
            ]  # fmt: skip
            failed |= subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL).returncode
            run = json.loads(Path(out.name).read_text() or "{}")
        point = {k: run.get(k) for k in CURVE_FIGURES}
        point["by_call"] = {op: {k: v for k, v in run.get("by_call", {}).get(op, {}).items()
                                 if k in ("p50_ms", "p99_ms")} for op in OPS}  # fmt: skip
        print(json.dumps(point), flush=True)
        points.append(point)
    result = {"pace_s": args.pace, "web_processes": args.web, "curve": points}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 1 if failed else 0
