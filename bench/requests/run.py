"""bench/requests: 1,000 GPU requests approved through the API by 8 concurrent approvers
while the poller polls a simulated fleet.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.requests

One simulator process serves the virtual nodes and a poller process polls them every
``--interval`` seconds (``services.poll_fleet``, as a Celery worker does); daphne serves
the portal. The pending requests are made first (through the service); then each
approver thread posts ``/api/v1/gpu-requests/<id>/approve/`` over one keep-alive
connection with its own API token. Each approval also places the request (after commit,
in the web process) and pushes to the live pages, so what is timed is the whole step.
Reports throughput and latency percentiles. The database is migrated and emptied of
nodes, pools, tenants and requests: use a scratch one.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.ingest.run import REPO, percentile, production_stack, start_simulator


def poller(interval: float) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from telemetry import services

    while True:
        started = time.monotonic()
        services.poll_fleet()
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


def empty_requests() -> None:
    from pools.models import Allocation, Lease, Pool
    from quotas.models import GpuRequest, Notice, Tenant

    Notice.objects.all().delete()
    GpuRequest.objects.all().delete()
    Allocation.objects.all().delete()
    Lease.objects.all().delete()
    Tenant.objects.all().delete()  # memberships and quotas with them
    Pool.objects.all().delete()


def setup(count: int, approvers: int) -> tuple[list[str], list[int]]:
    """A pool of every card, a tenant with room for all, approvers with tokens, and
    ``count`` pending requests of a 5 % / 1 GiB slice each."""
    from django.contrib.auth import get_user_model

    from pools.models import Pool
    from pools.services import refresh_cards
    from quotas.choices import Role
    from quotas.models import Membership, Quota, Tenant
    from quotas.requests.services import create_request
    from tokens.interface import issue

    users = get_user_model().objects
    users.filter(username__startswith="bench-").delete()
    pool = Pool.objects.create(name="bench", slug="bench")
    refresh_cards(pool)
    tenant = Tenant.objects.create(name="bench", slug="bench")
    big = 10**9
    Quota.objects.create(
        tenant=tenant, pool=pool, limit_vgpus=big, limit_compute_pct=big, limit_memory_mib=big,
        limit_gpu_hours=0, escalate_after_hours=0, expire_pending_after_hours=0,
    )  # fmt: skip
    dev = users.create_user("bench-dev", password="x")
    Membership.objects.create(user=dev, tenant=tenant, role=Role.MEMBER)
    tokens = []
    for i in range(approvers):
        approver = users.create_user(f"bench-approver-{i}", password="x")
        Membership.objects.create(user=approver, tenant=tenant, role=Role.APPROVER)
        tokens.append(issue(approver, name="bench")[1])
    ids = [
        create_request(dev, tenant=tenant, pool=pool, compute_pct=5, memory_mib=1024,
                       duration_hours=4, reason="bench").pk
        for _ in range(count)
    ]  # fmt: skip
    return tokens, ids


def approve_all(port: int, token: str, ids: list[int], latencies: list[float]) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    for req_id in ids:
        started = time.perf_counter()
        connection.request("POST", f"/api/v1/gpu-requests/{req_id}/approve/",
                           body=b'{"comment": "bench"}', headers=headers)  # fmt: skip
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"approve {req_id}: HTTP {response.status}")
        latencies.append(time.perf_counter() - started)
    connection.close()


def simulated_nodes(nodes: int, gpus: int, first_port: int) -> None:
    """The nodes of the simulator on ``first_port``..., polled once: their cards, online."""
    from agents.models import GPU, Node
    from telemetry import services

    Node.objects.bulk_create(
        Node(name=f"bench-{i:04d}", agent_url=f"http://127.0.0.1:{first_port + i}",
             agent_token="bench-token")
        for i in range(nodes)
    )  # fmt: skip
    services.poll_fleet()
    assert GPU.objects.count() == nodes * gpus


def start_daphne(port: int, env: dict, log: Path | None = None) -> subprocess.Popen:
    """daphne serving the portal on ``port``, once it answers /healthz."""
    out = log.open("w") if log else subprocess.DEVNULL
    daphne = subprocess.Popen(
        [str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(port),
         "portal.asgi:application"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/healthz")
            return daphne
        except OSError:
            if time.monotonic() > deadline:
                daphne.kill()
                raise SystemExit("daphne did not start") from None
            time.sleep(0.3)


def stop(children: list[subprocess.Popen]) -> None:
    for child in reversed(children):
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--approvers", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--first-port", type=int, default=23000)
    parser.add_argument("--poller", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    if args.poller:
        poller(args.interval)
        return 0

    production_stack("bench/requests")
    empty_requests()
    from quotas.choices import RequestState
    from quotas.models import GpuRequest

    agent = start_simulator(args.nodes, args.gpus, args.first_port, args.interval)
    children = [agent]
    try:
        simulated_nodes(args.nodes, args.gpus, args.first_port)
        tokens, ids = setup(args.requests, args.approvers)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        children.append(subprocess.Popen(
            [sys.executable, "-m", "bench.requests", "--poller", "--interval", str(args.interval)],
            cwd=REPO, env=env,
        ))  # fmt: skip
        port = args.first_port + args.nodes + 10
        children.append(start_daphne(port, env))
        time.sleep(args.interval)  # the poller is in its stride
        latencies: list[float] = []
        shares = [ids[i :: args.approvers] for i in range(args.approvers)]
        threads = [
            threading.Thread(target=approve_all, args=(port, tokens[i], shares[i], latencies))
            for i in range(args.approvers)
        ]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        placed = GpuRequest.objects.filter(state=RequestState.ALLOCATED).count()
    finally:
        stop(children)
    result = {
        "requests": args.requests, "approvers": args.approvers,
        "gpus": args.nodes * args.gpus, "poll_interval_s": args.interval,
        "wall_s": round(wall, 2), "approvals_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "max_ms": round(max(latencies) * 1000, 1), "placed": placed,
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if placed == args.requests else 1
