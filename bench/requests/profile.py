"""bench/requests/profile.py: the CPU cost of one approval through the API, one approver.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench \\
    python -m bench.requests.profile --requests 300 [--cprofile 40]

No simulator, poller or daphne: ``--nodes`` x 8 online cards are written directly, the
pending requests made through the service as in ``bench.requests``, then this process
posts ``/api/v1/gpu-requests/<id>/approve/`` with Django's test client (the whole view:
token, decide, placement after commit, notices, the response). Reports per approval this
process's CPU, its PostgreSQL backend's CPU (from /proc), statements and the time the
quota row is held (``place_request``); ``--cprofile N`` prints the N costliest functions.
The database is migrated and emptied of nodes, pools, tenants and requests.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import time

from bench.ingest.run import proc_cpu_s, production_stack


def make_cards(nodes: int, gpus: int) -> None:
    from agents.choices import GpuHealth, NodeState
    from agents.models import GPU, Node

    made = Node.objects.bulk_create(
        Node(name=f"bench-{i:04d}", agent_url=f"http://127.0.0.1:1/{i}", agent_token="t" * 32,
             state=NodeState.ONLINE)
        for i in range(nodes)
    )  # fmt: skip
    GPU.objects.bulk_create(
        GPU(node=node, index=i, uuid=f"GPU-bench-{node.pk}-{i}", model="A100",
            memory_total_mib=81920, health=GpuHealth.OK)
        for node in made for i in range(gpus)
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument(
        "--statements",
        type=int,
        default=0,
        metavar="N",
        help="print the N statements that took longest in all",
    )
    args = parser.parse_args(argv)
    production_stack("bench/requests/profile")
    from django.db import connection
    from django.test import Client

    from bench.requests.run import empty_requests, setup
    from quotas.choices import RequestState
    from quotas.models import GpuRequest
    from quotas.requests import services

    empty_requests()
    make_cards(args.nodes, args.gpus)
    warm = 20
    tokens, ids = setup(args.requests + warm, 1)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens[0]}", SERVER_NAME="127.0.0.1")
    statements: list[float] = []
    by_sql: dict[str, list[float]] = {}
    locked: list[float] = []

    def counted(execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append(time.perf_counter() - t0)
            by_sql.setdefault(sql, []).append(statements[-1])

    place_request = services.place_request

    def timed_place(req_id: int) -> bool:
        t0 = time.process_time()
        try:
            return place_request(req_id)
        finally:
            locked.append(time.process_time() - t0)

    services.place_request = timed_place  # place_queued looks it up in the module

    def approve(req_id: int) -> None:
        response = client.post(
            f"/api/v1/gpu-requests/{req_id}/approve/",
            data={"comment": "bench"},
            content_type="application/json",
        )
        if response.status_code != 200:
            raise SystemExit(f"approve {req_id}: HTTP {response.status_code}")

    for req_id in ids[:warm]:
        approve(req_id)
    locked.clear()
    profiler = cProfile.Profile(time.process_time) if args.cprofile else None
    with connection.execute_wrapper(counted):
        cpu0, pg0, wall0 = time.process_time(), proc_cpu_s(backend), time.perf_counter()
        if profiler:
            profiler.enable()
        for req_id in ids[warm:]:
            approve(req_id)
        if profiler:
            profiler.disable()
        cpu, pg = time.process_time() - cpu0, proc_cpu_s(backend) - pg0
        wall = time.perf_counter() - wall0
    services.place_request = place_request
    n = args.requests
    placed = GpuRequest.objects.filter(state=RequestState.ALLOCATED).count()
    print(json.dumps({
        "requests": n, "cards": args.nodes * args.gpus, "placed": placed,
        "client_cpu_ms_per_approval": round(cpu / n * 1e3, 3),
        "postgres_cpu_ms_per_approval": round(pg / n * 1e3, 3),
        "wall_ms_per_approval": round(wall / n * 1e3, 3),
        "place_request_cpu_ms": round(sum(locked) / max(len(locked), 1) * 1e3, 3),
        "statements_per_approval": round(len(statements) / n, 2),
        "statement_wall_ms_per_approval": round(sum(statements) / n * 1e3, 3),
        "load_average": os.getloadavg(),
    }, indent=2))  # fmt: skip
    if args.statements:
        for sql, times in sorted(by_sql.items(), key=lambda kv: -sum(kv[1]))[: args.statements]:
            print(f"{len(times) / n:6.2f}/approval {sum(times) / n * 1e3:7.3f} ms  {sql[:300]}")
    if profiler:
        stats = pstats.Stats(profiler).sort_stats("cumulative")
        stats.print_stats(args.cprofile)
        stats.print_callees("place_request|_approve|decide|place_queued|_run")
    return 0 if placed == n + warm else 1


if __name__ == "__main__":
    raise SystemExit(main())
