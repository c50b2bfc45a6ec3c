"""bench/api/profile.py: the CPU cost and statements of each call of bench/api, one client.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench \\
    python -m bench.api.profile --cycles 200 [--cprofile 40]

No simulator, poller or daphne: ``--nodes`` x 8 online cards are written directly (as in
bench/requests/profile) and this process runs what one bench/api client does, through
Django's test client and the whole middleware and DRF stack: create (with an
Idempotency-Key), read, read the allocation, release. Reports per call this process's
CPU, its PostgreSQL backend's CPU (from /proc) and the statements it ran; what daphne adds
(the ASGI hop, a thread per request) is not in it. ``--cprofile N`` prints the N costliest
functions of the whole run. The database is migrated and emptied of nodes, pools, tenants
and requests: use a scratch one.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
import uuid
from collections import defaultdict

from bench.api.run import OPS, setup
from bench.ingest.run import proc_cpu_s, production_stack
from bench.requests.profile import make_cards
from bench.requests.run import empty_requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)
    production_stack("bench/api/profile")
    from django.db import connection
    from django.test import Client

    from agents.models import Node

    empty_requests()
    Node.objects.all().delete()
    make_cards(args.nodes, args.gpus)
    [key], [tenant], pool = setup(1, 1)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}", HTTP_HOST="127.0.0.1")
    url = "/api/v1/gpu-requests/"
    ask = {"tenant": tenant, "pool": pool, "count": 1, "compute_pct": 5, "memory_mib": 1024,
           "duration_hours": 1, "reason": "bench/api/profile"}  # fmt: skip
    cpu: dict[str, list[float]] = defaultdict(list)
    backend: dict[str, list[float]] = defaultdict(list)
    statements: dict[str, list[int]] = defaultdict(list)
    client.get(url)  # connect, warm the caches
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]

    def timed(op: str, method: str, path: str, expect: int, **kwargs):
        queries: list[int] = []

        def count(execute, sql, params, many, context):
            queries.append(1)
            return execute(sql, params, many, context)

        db_before, before = proc_cpu_s(pid), time.process_time()
        with connection.execute_wrapper(count):
            response = getattr(client, method)(path, **kwargs)
        cpu[op].append(time.process_time() - before)
        backend[op].append(proc_cpu_s(pid) - db_before)
        statements[op].append(len(queries))
        if response.status_code != expect:
            raise SystemExit(f"{op}: HTTP {response.status_code} {response.content[:300]!r}")
        return response.json()

    profiler = cProfile.Profile() if args.cprofile else None
    if profiler:
        profiler.enable()
    for _ in range(args.cycles):
        req = timed("create", "post", url, 201, data=ask, content_type="application/json",
                    HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()))  # fmt: skip
        if req["state"] != "allocated":
            raise SystemExit(f"create: state {req['state']}")
        timed("read", "get", f"{url}{req['id']}/", 200)
        timed("read_allocation", "get", f"/api/v1/allocations/{req['allocations'][0]['id']}/", 200)
        timed("release", "post", f"{url}{req['id']}/release/", 200)
    if profiler:
        profiler.disable()

    def ms(values: list[float]) -> float:
        return round(sum(values) / len(values) * 1000, 2)

    result = {
        op: {"portal_cpu_ms": ms(cpu[op]), "postgres_cpu_ms": ms(backend[op]),
             "statements": round(sum(statements[op]) / len(statements[op]), 1)}
        for op in OPS
    }  # fmt: skip
    result["cycle"] = {k: round(sum(result[op][k] for op in OPS), 2)
                       for k in ("portal_cpu_ms", "postgres_cpu_ms", "statements")}  # fmt: skip
    print(json.dumps({"cycles": args.cycles, **result}, indent=2))
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
