"""bench/placement/service.py: allocations per second through the allocation service.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench SECRET_KEY=bench \\
    python -m bench.placement.service --cards 10000 --clients 8 --seconds 20

One pool of ``--cards`` healthy cards (8 per online node) filled to about half by counters
set directly, then ``--clients`` processes, each with its own database connection, place
one-vGPU leases of mixed sizes with ``pools.services.place_lease`` and release them with
``release_lease`` (each keeps its last 20 leases), for ``--seconds``. Reports placements
per second over all clients, latency percentiles of a placement and of a release, lost
races (retries), and checks afterwards that every card's counters equal the slices held
on it plus the prefill. The database named in DATABASE_URL is migrated and emptied.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import time

from bench.placement.common import GIB, RACKS, percentile

PHYSICAL = 81920


def setup(cards: int, policy: str) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """A fresh pool; returns (pool id, holder id, prefill per card)."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from agents.choices import GpuHealth, NodeState
    from agents.models import GPU, Node
    from pools import services
    from pools.models import Allocation, Lease, Pool, PoolCard

    call_command("migrate", verbosity=0)
    Allocation.objects.all().delete()
    Lease.objects.all().delete()
    Pool.objects.all().delete()
    Node.objects.all().delete()
    nodes = Node.objects.bulk_create(
        Node(name=f"bench-{i:05d}", agent_url=f"http://127.0.0.1:1/{i}", agent_token="t" * 32,
             state=NodeState.ONLINE, labels={"rack": f"r{i % RACKS}"})
        for i in range((cards + 7) // 8)
    )  # fmt: skip
    gpus = GPU.objects.bulk_create(
        GPU(node=nodes[i // 8], index=i % 8, uuid=f"GPU-bench-{i:08d}", model="A100",
            memory_total_mib=PHYSICAL, health=GpuHealth.OK)
        for i in range(cards)
    )  # fmt: skip
    pool = Pool.objects.create(name="bench", slug="bench", match_by_rules=False, policy=policy)
    services.add_cards(pool, [g.pk for g in gpus])
    rnd = random.Random(1)
    prefill: dict[int, tuple[int, int]] = {}
    rows = []
    for card in PoolCard.objects.filter(pool=pool):
        if rnd.random() < 0.4:
            continue
        slices = rnd.randint(1, 3)
        compute = sum(rnd.choice([10, 20, 25, 30]) for _ in range(slices))
        memory = sum(rnd.choice([4, 8, 16]) * GIB for _ in range(slices))
        card.compute_allocated, card.memory_allocated_mib, card.slices = compute, memory, slices
        prefill[card.gpu_id] = (compute, memory)
        rows.append(card)
    PoolCard.objects.bulk_update(rows, ["compute_allocated", "memory_allocated_mib", "slices"])
    user, _ = get_user_model().objects.get_or_create(username="bench")
    with connection.cursor() as cursor:  # a steady state: no dead rows of earlier runs
        cursor.execute("VACUUM ANALYZE")
    return pool.pk, user.pk, prefill


def client(n: int, pool_id: int, user_id: int, seconds: float, out) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.ingest.run import proc_cpu_s
    from pools import placement, services
    from pools.models import Pool

    pool = Pool.objects.get(pk=pool_id)
    user = get_user_model().objects.get(pk=user_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    cpu0, pg0 = time.process_time(), proc_cpu_s(backend)
    rnd = random.Random(n)
    held: list[int] = []
    place_s, release_s, refused = [], [], 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ask = placement.Ask(
            compute_pct=rnd.choice([5, 10, 20, 25, 30, 50]),
            memory_mib=rnd.choice([1, 2, 4, 8, 16]) * GIB,
        )
        t0 = time.perf_counter()
        try:
            lease = services.place_lease(pool, ask, holder=user, unix_user="bench")
        except services.PlacementError:
            refused += 1
            continue
        finally:
            place_s.append(time.perf_counter() - t0)
        held.append(lease.pk)
        if len(held) > 20:
            t0 = time.perf_counter()
            services.release_lease(held.pop(0))
            release_s.append(time.perf_counter() - t0)
    cpu, pg = time.process_time() - cpu0, proc_cpu_s(backend) - pg0
    for lease_id in held:
        services.release_lease(lease_id)
    out.put({"placed": len(place_s) - refused, "refused": refused, "place_s": place_s,
             "release_s": release_s, "cpu_s": cpu, "pg_cpu_s": pg})  # fmt: skip


def check(pool_id: int, prefill: dict[int, tuple[int, int]]) -> int:
    """Cards whose counters differ from their active slices plus the prefill."""
    from django.db.models import Count, Sum

    from pools.choices import AllocationState
    from pools.models import Allocation, PoolCard

    held = {
        row["gpu_id"]: (row["c"], row["m"], row["n"])
        for row in Allocation.objects.filter(pool_id=pool_id, state=AllocationState.ACTIVE)
        .values("gpu_id").annotate(c=Sum("compute_pct"), m=Sum("memory_mib"), n=Count("id"))
    }  # fmt: skip
    wrong = 0
    for card in PoolCard.objects.filter(pool_id=pool_id):
        c, m, _ = held.get(card.gpu_id, (0, 0, 0))
        pc, pm = prefill.get(card.gpu_id, (0, 0))
        if (card.compute_allocated, card.memory_allocated_mib) != (c + pc, m + pm):
            wrong += 1
        if card.compute_allocated > card.compute_capacity:
            wrong += 1
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--policy", default="binpack", choices=["binpack", "spread"])
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.db import connections

    pool_id, user_id, prefill = setup(args.cards, args.policy)
    connections.close_all()  # the children open their own
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=client, args=(n, pool_id, user_id, args.seconds, out))
             for n in range(args.clients)]  # fmt: skip
    for proc in procs:
        proc.start()
    results = [out.get(timeout=args.seconds + 120) for _ in procs]
    for proc in procs:
        proc.join()
    places = [t for r in results for t in r["place_s"]]
    releases = [t for r in results for t in r["release_s"]]
    placed = sum(r["placed"] for r in results)
    result = {
        "policy": args.policy, "cards": args.cards, "clients": args.clients,
        "seconds": args.seconds, "placed": placed,
        "refused": sum(r["refused"] for r in results),
        "placements_per_s": round(placed / args.seconds, 1),
        "releases_per_s": round(len(releases) / args.seconds, 1),
        "place_p50_ms": round(percentile(places, 0.5) * 1e3, 2),
        "place_p99_ms": round(percentile(places, 0.99) * 1e3, 2),
        "release_p50_ms": round(percentile(releases, 0.5) * 1e3, 2),
        "release_p99_ms": round(percentile(releases, 0.99) * 1e3, 2),
        # CPU per placement (each with about one release) of the clients and of their
        # PostgreSQL backends: the figure that does not depend on how loaded the machine is.
        "client_cpu_ms_per_placement": round(sum(r["cpu_s"] for r in results) / placed * 1e3, 2),
        "postgres_cpu_ms_per_placement": round(
            sum(r["pg_cpu_s"] for r in results) / placed * 1e3, 2),
        "load_average": os.getloadavg(),
        "cards_with_wrong_counters": check(pool_id, prefill),
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
