"""bench/dashboard: the server's render time of "/" for a platform admin, 1,000 nodes x 8 GPUs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.dashboard

Writes straight into the database (use a scratch one): ``--nodes`` nodes of ``--gpus``
cards, their latest readings in Redis (as one poll cycle would store them), one pool
holding every card with a third of them allocated, 300 firing events over 6 rules, 30
requests waiting for approval, and 7 days of accounting rows for 20 tenants. Then it
loads "/" ``--rounds`` times through Django's test client as the admin (the whole
request: middleware, the view, every panel, the template) and prints the p50 and p95 wall
time, the queries per load and the page's size, and apart from them the heatmap's own
part (the cells' query, ``heat_nodes`` and ``render``). The readings are stored again
before each load, so none goes stale. Its rows are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from datetime import timedelta
from decimal import Decimal

PREFIX = "bench-dash-"


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def seed(nodes: int, gpus: int):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from agents.choices import NodeState
    from agents.models import GPU, Node
    from alerts.choices import EventState, Severity
    from alerts.models import Event
    from pools.models import Pool, PoolCard
    from quotas.choices import RequestState
    from quotas.models import GpuRequest, Tenant
    from reports.models import UsageDay

    cleanup()
    rng = random.Random(1)
    admin = get_user_model().objects.create_superuser(f"{PREFIX}admin", password="x")
    made = Node.objects.bulk_create(
        [
            Node(
                name=f"{PREFIX}{n:04d}",
                agent_url=f"http://10.1.{n // 250}.{n % 250}:9400",
                state=NodeState.ONLINE,
            )
            for n in range(nodes)
        ],
        batch_size=1000,
    )
    cards = GPU.objects.bulk_create(
        [
            GPU(
                node=node,
                index=i,
                uuid=f"GPU-D{node.pk}-{i}",
                model="NVIDIA H100 80GB HBM3",
                memory_total_mib=81920,
            )
            for node in made
            for i in range(gpus)
        ],
        batch_size=4000,
    )
    snapshots = {
        node.pk: {
            "hostname": node.name,
            "gpus": [
                {
                    "index": i,
                    "uuid": f"GPU-D{node.pk}-{i}",
                    "name": "NVIDIA H100 80GB HBM3",
                    "utilization_gpu_pct": rng.choice((0, 0, 3, rng.randint(0, 100))),
                    "memory_used_mib": rng.randint(0, 80000),
                    "memory_total_mib": 81920,
                    "temperature_c": rng.randint(30, 80),
                    "power_w": rng.uniform(60, 650),
                    "health": "ok",
                }
                for i in range(gpus)
            ],
        }
        for node in made
    }
    pool = Pool.objects.create(name=f"{PREFIX}pool", slug=f"{PREFIX}pool", match_by_rules=False)
    PoolCard.objects.bulk_create(
        [
            PoolCard(
                pool=pool,
                gpu=card,
                compute_capacity=100,
                memory_capacity_mib=81920,
                compute_allocated=100 if n % 3 == 0 else 0,
                slices=1 if n % 3 == 0 else 0,
                memory_allocated_mib=40960 if n % 3 == 0 else 0,
            )
            for n, card in enumerate(cards)
        ],
        batch_size=4000,
    )
    now = timezone.now()
    Event.objects.bulk_create(
        [
            Event(
                rule_key=f"{PREFIX}rule-{n % 6}",
                rule_name=f"Bench rule {n % 6}",
                severity=(Severity.CRITICAL, Severity.WARNING)[n % 2],
                scope=f"node:{PREFIX}{n:04d}",
                fingerprint=f"{PREFIX}{n}",
                state=EventState.FIRING,
                started_at=now - timedelta(minutes=n),
                last_seen_at=now,
            )
            for n in range(300)
        ]
    )
    tenants = Tenant.objects.bulk_create(
        [Tenant(name=f"{PREFIX}tenant-{n:02d}", slug=f"{PREFIX}tenant-{n:02d}") for n in range(20)]
    )
    GpuRequest.objects.bulk_create(
        [
            GpuRequest(
                tenant=tenants[n % 20],
                pool=pool,
                requester=admin,
                reason="bench",
                compute_pct=25,
                memory_mib=8192,
                duration_hours=4,
                state=RequestState.PENDING,
            )
            for n in range(30)
        ]
    )
    today = timezone.localdate()
    UsageDay.objects.bulk_create(
        [
            UsageDay(
                day=today - timedelta(days=d),
                tenant_id=t.pk,
                user_id=u,
                pool_id=pool.pk,
                gpu_hours=Decimal(rng.randint(0, 400)),
                memory_gib_hours=Decimal(0),
                used_gpu_hours=rng.uniform(0, 300),
                computed_at=now,
            )
            for d in range(7)
            for t in tenants
            for u in range(5)
        ]
    )
    return admin, snapshots


def cleanup() -> None:
    from django.contrib.auth import get_user_model

    from agents.models import Node
    from alerts.models import Event
    from pools.models import Pool
    from quotas.models import GpuRequest, Tenant
    from reports.models import UsageDay

    tenants = Tenant.objects.filter(name__startswith=PREFIX)
    UsageDay.objects.filter(tenant_id__in=tenants.values("pk")).delete()
    GpuRequest.objects.filter(tenant__in=tenants).delete()
    tenants.delete()
    Event.objects.filter(rule_key__startswith=PREFIX).delete()
    Pool.objects.filter(name__startswith=PREFIX).delete()
    Node.objects.filter(name__startswith=PREFIX).delete()
    get_user_model().objects.filter(username__startswith=PREFIX).delete()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--keep", action="store_true", help="leave the rows for a browser")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from agents.models import GPU
    from telemetry import heatmap, readings

    call_command("migrate", verbosity=0)
    admin, snapshots = seed(args.nodes, args.gpus)
    client = Client(SERVER_NAME="localhost")
    client.force_login(admin)
    try:
        times, queries, size = [], [], 0
        for n in range(args.rounds + 1):
            readings.store_latest(snapshots)
            with CaptureQueriesContext(connection) as captured:
                start = time.perf_counter()
                response = client.get("/")
                elapsed = time.perf_counter() - start
            assert response.status_code == 200, response.status_code
            if n:  # the first load warms the caches (templates, translations, icons)
                times.append(elapsed * 1000)
                queries.append(len(captured))
            size = len(response.content)
        cells = response.content.count(b'data-i="')
        print(
            f'"/" as a platform admin, {args.nodes} nodes x {args.gpus} GPUs ({cells} heatmap '
            f"cells), {args.rounds} loads: p50 {statistics.median(times):.0f} ms, "
            f"p95 {percentile(times, 95):.0f} ms, min {min(times):.0f} ms; "
            f"{statistics.median(queries):.0f} queries; {size / 1024:.0f} KiB of HTML"
        )
        tiles, _errors = readings.node_summaries_and_errors()
        parts = {"tiles": [], "heatmap": []}
        for _n in range(args.rounds):
            start = time.perf_counter()
            tiles, _errors = readings.node_summaries_and_errors()
            parts["tiles"].append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            gpus = GPU.objects.values_list("pk", "node_id", "index")
            heatmap.render(heatmap.heat_nodes(tiles, gpus.iterator(chunk_size=10_000)))
            parts["heatmap"].append((time.perf_counter() - start) * 1000)
        print(
            f"  of which the tiles (readings from Redis, summaries): "
            f"{statistics.median(parts['tiles']):.0f} ms p50; the heatmap (cards' query, "
            f"cells, HTML): {statistics.median(parts['heatmap']):.0f} ms p50"
        )
    finally:
        if not args.keep:
            cleanup()
    return 0
