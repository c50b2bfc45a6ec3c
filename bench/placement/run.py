"""bench/placement: the product's placement of mixed asks, timed against PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench SECRET_KEY=bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 python -m bench.placement --cards 10000 --asks 500

The pool of ``bench.placement.service`` (``--cards`` cards, 8 per online node labelled
with a rack, counters prefilled to about half; the database named in DATABASE_URL is
migrated and emptied), then one client places a stream of mixed asks
(``bench.placement.common.mixed_ask``: one slice, several across nodes, several on one
node, whole cards, a node label) through ``pools.services.place_lease``, the path GPU
requests and failover take: ``services.picks`` reads the fitting cards in SQL, runs
``placement.place`` on them, and one ``lease_sql.place`` statement locks and takes the
cards and inserts the lease. Old leases are released now and then (``release_lease``)
so the pool stays about as full. Reports per kind of ask the wall time and this
process's CPU per placement, the statements sent, how many found no room; over the
run the PostgreSQL backend's CPU; afterwards every card's counters are checked against
the slices held. With REDIS_URL unset Celery runs tasks eagerly and each placement
would also try to reach the (absent) agents: set it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time


def run(cards: int, asks: int, policy: str, seed: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.ingest.run import proc_cpu_s
    from bench.placement.common import kind_of, mixed_ask, percentile
    from bench.placement.service import check, setup
    from pools import services
    from pools.models import Pool

    pool_id, user_id, prefill = setup(cards, policy)
    pool = Pool.objects.get(pk=pool_id)
    user = get_user_model().objects.get(pk=user_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    rnd = random.Random(seed)
    sent: list[int] = []

    def counted(execute, sql, params, many, context):
        sent.append(1)
        return execute(sql, params, many, context)

    held: list[int] = []
    by_kind: dict[str, dict[str, list[float]]] = {}
    refused: dict[str, int] = {}
    releases: list[float] = []

    def one(record: bool) -> None:
        ask = mixed_ask(rnd, policy)
        kind = kind_of(ask)
        sent.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            lease = services.place_lease(pool, ask, holder=user, unix_user="bench")
        except services.PlacementError:
            lease = None
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if record:
            times = by_kind.setdefault(kind, {"wall": [], "cpu": [], "statements": []})
            times["wall"].append(wall)
            times["cpu"].append(cpu)
            times["statements"].append(len(sent))
            refused[kind] = refused.get(kind, 0) + (lease is None)
        if lease is not None:
            held.append(lease.pk)
        if len(held) > 50 and rnd.random() < 0.5:  # an old lease ends
            t0 = time.perf_counter()
            services.release_lease(held.pop(rnd.randrange(len(held))))
            if record:
                releases.append(time.perf_counter() - t0)

    with connection.execute_wrapper(counted):
        for _ in range(20):  # warm: caches, plans
            one(record=False)
        pg0, wall0 = proc_cpu_s(backend), time.perf_counter()
        for _ in range(asks):
            one(record=True)
        pg, wall = proc_cpu_s(backend) - pg0, time.perf_counter() - wall0
    for lease_id in held:
        services.release_lease(lease_id)

    def ms(values: list[float], q: float) -> float:
        return round(percentile(values, q) * 1e3, 2)

    every = {k: [v for t in by_kind.values() for v in t[k]] for k in ("wall", "cpu")}
    return {
        "policy": policy, "cards": cards, "asks": asks,
        "not_placed": sum(refused.values()),
        "place_wall_p50_p99_ms": [ms(every["wall"], 0.5), ms(every["wall"], 0.99)],
        "place_cpu_p50_p99_ms": [ms(every["cpu"], 0.5), ms(every["cpu"], 0.99)],
        "release_wall_p50_p99_ms": [ms(releases, 0.5), ms(releases, 0.99)] if releases else None,
        # Placements and their releases together, over the whole run.
        "postgres_cpu_ms_per_placement": round(pg / asks * 1e3, 2),
        "wall_ms_per_placement": round(wall / asks * 1e3, 2),
        "by_kind": {
            kind: {
                "asks": len(t["wall"]), "not_placed": refused[kind],
                "wall_p50_p99_ms": [ms(t["wall"], 0.5), ms(t["wall"], 0.99)],
                "cpu_p50_p99_ms": [ms(t["cpu"], 0.5), ms(t["cpu"], 0.99)],
                "statements_mean": round(sum(t["statements"]) / len(t["statements"]), 2),
            }
            for kind, t in sorted(by_kind.items())
        },
        "load_average": os.getloadavg(),
        "cards_with_wrong_counters": check(pool_id, prefill),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--asks", type=int, default=500, help="placements timed, per policy")
    parser.add_argument("--policy", default="both", choices=["binpack", "spread", "both"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    policies = ("binpack", "spread") if args.policy == "both" else (args.policy,)
    results = [run(args.cards, args.asks, policy, args.seed) for policy in policies]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
