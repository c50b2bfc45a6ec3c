"""bench/placement/profile.py: the CPU cost of one place + release, one client alone.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench SECRET_KEY=bench \\
    python -m bench.placement.profile --cards 10000 --rounds 1000 [--cprofile 25]

The same pool as ``bench.placement.service`` (emptied and refilled), then one client in
this process places a one-vGPU lease and releases its oldest beyond 20, ``--rounds``
times. Reports per place + release: this process's CPU (``time.process_time``), its
PostgreSQL backend's CPU (from /proc, so on the same machine only), the statements sent
and their time as the client saw it; ``--cprofile N`` prints the N most costly functions.
CPU, not wall time, is the figure to compare on a shared machine.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import time

from bench.ingest.run import proc_cpu_s

GIB = 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--policy", default="binpack", choices=["binpack", "spread"])
    parser.add_argument("--cprofile", type=int, default=0, metavar="N")
    parser.add_argument(
        "--server-side-binding",
        action="store_true",
        help="Django's server_side_binding for every query (it prepares nothing: Django sets "
        "prepare_threshold=None; the hot path prepares its own, DATABASE_PREPARED_STATEMENTS)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.db import connections

    if args.server_side_binding:  # before the first connection is made
        connections["default"].settings_dict["OPTIONS"]["server_side_binding"] = True
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.placement.service import setup
    from pools import placement, services
    from pools.models import Pool

    pool_id, user_id, _prefill = setup(args.cards, args.policy)
    pool = Pool.objects.get(pk=pool_id)
    user = get_user_model().objects.get(pk=user_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    statements: list[float] = []

    def counted(execute, sql, params, many, context):
        t0 = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append(time.perf_counter() - t0)

    rnd = random.Random(7)
    held: list[int] = []

    def one_round() -> None:
        ask = placement.Ask(
            compute_pct=rnd.choice([5, 10, 20, 25, 30, 50]),
            memory_mib=rnd.choice([1, 2, 4, 8, 16]) * GIB,
        )
        held.append(services.place_lease(pool, ask, holder=user, unix_user="bench").pk)
        if len(held) > 20:
            services.release_lease(held.pop(0))

    for _ in range(50):  # warm: caches, plans, the first 20 leases
        one_round()
    profiler = cProfile.Profile(time.process_time) if args.cprofile else None
    with connection.execute_wrapper(counted):
        cpu0, pg0, wall0 = time.process_time(), proc_cpu_s(backend), time.perf_counter()
        if profiler:
            profiler.enable()
        for _ in range(args.rounds):
            one_round()
        if profiler:
            profiler.disable()
        cpu, pg = time.process_time() - cpu0, proc_cpu_s(backend) - pg0
        wall = time.perf_counter() - wall0
    for lease_id in held:
        services.release_lease(lease_id)
    n = args.rounds
    print(json.dumps({
        "policy": args.policy, "cards": args.cards, "rounds": n,
        "server_side_binding": args.server_side_binding,
        "client_cpu_ms_per_round": round(cpu / n * 1e3, 3),
        "postgres_cpu_ms_per_round": round(pg / n * 1e3, 3),
        "wall_ms_per_round": round(wall / n * 1e3, 3),
        "statements_per_round": round(len(statements) / n, 2),
        "statement_wall_ms_per_round": round(sum(statements) / n * 1e3, 3),
        "load_average": os.getloadavg(),
    }, indent=2))  # fmt: skip
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
