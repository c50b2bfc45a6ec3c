"""bench/idle: the idle report and the monthly accounting for 8,000 GPUs and 20,000
allocations over 30 days of rollups.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.idle

The inventory, tenants and allocations are bulk-inserted; the rollups are made by SQL
(``generate_series``): hour rollups for the month (8,000 cards x 720 hours, and two hours
a day of each slice's owner), minute rollups only for the idle window (the last two
hours). Then it times the beat work (the idle scan; one day's accounting) and, through
Django's test client, the pages and the API: page time (the whole request) and query
time (the SQL inside it). The database is migrated and emptied of nodes, pools, tenants
and requests: use a scratch one.

``--incremental MINUTES`` times instead a full pass, then (``--passes`` times) MINUTES of
new minute rollups and an incremental pass against a full one on the same data (from the
same previous verdicts), and prints JSON: seconds, SQL, stages, whether the verdicts are
the same, the load average. ``--days 8`` gives the scan the same work as 30.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import contextmanager
from datetime import timedelta

SQL_SECONDS: list[float] = []


def _timed_sql(execute, sql, params, many, context):
    started = time.perf_counter()
    try:
        return execute(sql, params, many, context)
    finally:
        SQL_SECONDS.append(time.perf_counter() - started)


@contextmanager
def measured():
    """Wall time of the block and the time its SQL took (queries, seconds)."""
    from django.db import connection

    SQL_SECONDS.clear()
    out = {}
    started = time.perf_counter()
    with connection.execute_wrapper(_timed_sql):
        yield out
    out["wall"] = time.perf_counter() - started
    out["sql"] = sum(SQL_SECONDS)
    out["queries"] = len(SQL_SECONDS)


def build(gpus: int, allocations: int, tenants: int, days: int) -> dict:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from agents.choices import GpuHealth, NodeState
    from agents.models import GPU, Node
    from pools.choices import AllocationState, LeaseState
    from pools.models import Allocation, Lease, Pool, PoolCard
    from quotas.choices import RequestState, Role
    from quotas.models import GpuRequest, Membership, Tenant
    from reports.models import AllocationIdle, IdleCard, UsageDay

    call_command("migrate", verbosity=0)
    for model in (AllocationIdle, IdleCard, UsageDay, GpuRequest, Allocation, Lease, Tenant,
                  Pool, Node):  # fmt: skip
        model.objects.all().delete()
    users = get_user_model().objects
    users.filter(username__startswith="bench-").delete()
    now = timezone.now().replace(second=0, microsecond=0)
    month_start = (now - timedelta(days=days)).replace(minute=0)
    nodes = Node.objects.bulk_create(
        Node(name=f"bench-{i:05d}", agent_url=f"http://127.0.0.1:1/{i}", agent_token="t" * 32,
             state=NodeState.ONLINE) for i in range((gpus + 7) // 8)
    )  # fmt: skip
    cards = GPU.objects.bulk_create(
        GPU(node=nodes[i // 8], index=i % 8, uuid=f"GPU-bench-{i:08d}", model="A100",
            memory_total_mib=81920, health=GpuHealth.OK) for i in range(gpus)
    )  # fmt: skip
    pool = Pool.objects.create(name="bench", slug="bench", match_by_rules=False)
    PoolCard.objects.bulk_create(
        PoolCard(pool=pool, gpu=g, compute_capacity=100, memory_capacity_mib=81920) for g in cards
    )
    teams = Tenant.objects.bulk_create(
        Tenant(name=f"bench-{i}", slug=f"bench-{i}") for i in range(tenants)
    )
    people = users.bulk_create(
        users.model(username=f"bench-{i}", password="!") for i in range(tenants * 10)
    )
    Membership.objects.bulk_create(
        Membership(user=u, tenant=teams[i // 10], role=Role.ADMIN if i % 10 == 0 else Role.MEMBER)
        for i, u in enumerate(people)
    )
    # Allocation i: a 30 % / 16 GiB slice on card i mod gpus (whole cards every 10th),
    # held by member i mod people; placed at the month's start or later.
    leases, requests, allocs = [], [], []
    for i in range(allocations):
        whole = i % 10 == 0
        holder = people[i % len(people)]
        placed = month_start + timedelta(hours=(i * 7) % (days * 12))
        lease = Lease(pool=pool, holder=holder, unix_user=f"u{i}", state=LeaseState.ACTIVE,
                      count=1, compute_pct=30, memory_mib=16384, whole_card=whole)  # fmt: skip
        leases.append(lease)
    Lease.objects.bulk_create(leases, batch_size=5000)
    for i, lease in enumerate(leases):
        placed = month_start + timedelta(hours=(i * 7) % (days * 12))
        requests.append(GpuRequest(
            tenant=teams[(i % len(people)) // 10], pool=pool, requester=lease.holder,
            reason="bench", lease=lease, compute_pct=30, memory_mib=16384,
            whole_card=lease.whole_card, state=RequestState.ALLOCATED,
            queued_at=placed - timedelta(minutes=i % 90), placed_at=placed,
        ))  # fmt: skip
        allocs.append(Allocation(
            lease=lease, pool=pool, gpu=cards[i % gpus], compute_pct=30, memory_mib=16384,
            whole_card=lease.whole_card, placed_at=placed, state=AllocationState.ACTIVE,
        ))  # fmt: skip
    GpuRequest.objects.bulk_create(requests, batch_size=5000)
    Allocation.objects.bulk_create(allocs, batch_size=5000)
    started = time.perf_counter()
    with connection.cursor() as c:
        # Busy allocations: three in four (i mod 4 != 0); a card is busy when one of its
        # allocations is. Hours: the card's utilization follows; each busy slice's owner
        # runs two hours a day (10:00 and 11:00). Minutes: the last two hours.
        c.execute("""
            INSERT INTO telemetry_gpuhour (gpu_id, bucket, samples, util_avg, util_max,
                                           memory_used_avg_mib, memory_used_max_mib)
            SELECT g.id, b, 720, (g.id %% 7) * 10.0, (g.id %% 7) * 12.0, 4096, 8192
            FROM agents_gpu g CROSS JOIN generate_series(%s::timestamptz, %s, '1 hour') b
        """, [month_start, now - timedelta(hours=1)])  # fmt: skip
        c.execute("""
            INSERT INTO telemetry_ownerhour (gpu_id, owner, bucket, samples,
                                             memory_used_avg_mib, memory_used_max_mib)
            SELECT a.gpu_id, l.unix_user, b, 720, 6000, 8000
            FROM pools_allocation a JOIN pools_lease l ON l.id = a.lease_id
            CROSS JOIN generate_series(%s::timestamptz, %s, '1 hour') b
            WHERE NOT a.whole_card AND a.id %% 4 <> 0 AND b >= a.placed_at
              AND extract(hour FROM b) IN (10, 11)
        """, [month_start, now - timedelta(hours=1)])  # fmt: skip
        add_minutes(now - timedelta(minutes=120), 120)  # the idle window's minutes
        c.execute("ANALYZE")
        counts = {}
        for table in ("telemetry_gpuhour", "telemetry_ownerhour", "telemetry_gpuminute",
                      "telemetry_ownerminute"):  # fmt: skip
            c.execute(f"SELECT count(*) FROM {table}")  # noqa: S608
            counts[table] = c.fetchone()[0]
    counts["rollups_seconds"] = round(time.perf_counter() - started, 1)
    return counts


def add_minutes(start, minutes: int) -> None:
    """``minutes`` more minute rollups from ``start``, as the build made the window's."""
    from django.db import connection

    end = start + timedelta(minutes=minutes - 1)
    with connection.cursor() as c:
        c.execute("""
            INSERT INTO telemetry_gpuminute (gpu_id, bucket, samples, util_avg, util_max,
                                             memory_used_avg_mib, memory_used_max_mib)
            SELECT g.id, b, 12,
                   CASE WHEN EXISTS (SELECT 1 FROM pools_allocation a WHERE a.gpu_id = g.id
                                     AND a.id %% 4 <> 0) THEN 60 ELSE 0 END, 70, 4096, 8192
            FROM agents_gpu g CROSS JOIN generate_series(%s::timestamptz, %s, '1 minute') b
        """, [start, end])  # fmt: skip
        c.execute("""
            INSERT INTO telemetry_ownerminute (gpu_id, owner, bucket, samples,
                                               memory_used_avg_mib, memory_used_max_mib)
            SELECT a.gpu_id, l.unix_user, b, 12, 6000, 8000
            FROM pools_allocation a JOIN pools_lease l ON l.id = a.lease_id
            CROSS JOIN generate_series(%s::timestamptz, %s, '1 minute') b
            WHERE a.id %% 4 <> 0
        """, [start, end])  # fmt: skip


def incremental(minutes: int, passes: int) -> dict:
    """A full pass, then ``passes`` times: ``minutes`` of new rollups and an incremental
    pass, and a full pass on the same data for comparison (p95s carried in all but the
    first). Seconds, each pass's stages, and the load average."""
    from reports import scan
    from reports.models import AllocationIdle
    from telemetry.models import GpuMinute

    last = GpuMinute.objects.order_by("-bucket").values_list("bucket", flat=True).first()
    now = last + timedelta(minutes=1)
    out = {"minutes_per_pass": minutes, "load_before": os.getloadavg(), "passes": []}
    with measured() as m:
        result = scan.scan(now, p95=True, incremental=True)
    out["first_full"] = {"wall": round(m["wall"], 2), "sql": round(m["sql"], 2),
                         "queries": m["queries"], "stages": result.stages}  # fmt: skip
    for _ in range(passes):
        add_minutes(now, minutes)
        now += timedelta(minutes=minutes)
        kept = list(AllocationIdle.objects.all())
        with measured() as m:
            inc = scan.scan(now, p95=False, incremental=True)
        got = {r.allocation_id: _fields(r) for r in AllocationIdle.objects.all()}
        AllocationIdle.objects.all().delete()
        AllocationIdle.objects.bulk_create(kept, batch_size=5000)
        with measured() as f:
            full = scan.scan(now, p95=False, incremental=False)
        same = got == {r.allocation_id: _fields(r) for r in AllocationIdle.objects.all()}
        out["passes"].append({
            "incremental": {"wall": round(m["wall"], 2), "sql": round(m["sql"], 2),
                            "queries": m["queries"], "full": inc.full, "stages": inc.stages},
            "full": {"wall": round(f["wall"], 2), "sql": round(f["sql"], 2),
                     "queries": f["queries"], "stages": full.stages},
            "same_verdicts": same, "load": os.getloadavg(),
        })  # fmt: skip
        # The full pass wrote the state again: the next incremental one starts from it,
        # as from the incremental pass it replaced.
    return out


def _fields(row) -> tuple:
    return tuple(getattr(row, f.attname) for f in row._meta.concrete_fields)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8000)
    parser.add_argument("--allocations", type=int, default=20000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--reuse", action="store_true", help="time again on the data a previous run built"
    )
    parser.add_argument(
        "--scan-only", action="store_true",
        help="time the idle scan alone",
    )  # fmt: skip
    parser.add_argument(
        "--incremental", type=int, metavar="MINUTES", default=0,
        help="time incremental passes (each after MINUTES new minute rollups) against full "
             "ones and print JSON; nothing else",
    )  # fmt: skip
    parser.add_argument("--passes", type=int, default=3, help="incremental passes (JSON)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.utils import timezone

    from reports import accounting, scan, services

    settings.ALLOWED_HOSTS = ["*"]
    started = time.perf_counter()
    if not args.reuse:
        counts = build(args.gpus, args.allocations, args.tenants, args.days)
        print(f"built in {time.perf_counter() - started:.0f} s: {counts}")
    if args.incremental:
        figures = incremental(args.incremental, args.passes)
        figures["scale"] = {"gpus": args.gpus, "allocations": args.allocations}
        print(json.dumps(figures, default=str))
        return 0

    with measured() as m:
        result = scan.scan(p95=True)
    print(
        f"idle scan (beat): {m['wall']:.2f} s, SQL {m['sql']:.2f} s in {m['queries']} "
        f"queries; {result.allocations} allocations, {result.idle} idle, {result.cards} cards"
    )
    with measured() as m:
        result = scan.scan(p95=False)
    print(f"idle scan, p95s carried (the other scans of the hour): {m['wall']:.2f} s")
    if args.scan_only:
        return 0
    with measured() as m:
        services.reclaim()
    print(f"reclaim pass: {m['wall']:.2f} s")
    today = timezone.localdate()
    with measured() as m:
        rows = accounting.materialize_day(today - timedelta(days=1))
    print(f"one day's accounting (beat): {m['wall']:.2f} s, SQL {m['sql']:.2f} s, {rows} rows")
    started = time.perf_counter()
    first = (today - timedelta(days=args.days)).replace(day=1)
    day = first
    while day <= today and not args.reuse:
        accounting.materialize_day(day)
        day += timedelta(days=1)
    if not args.reuse:
        print(f"filled {(today - first).days + 1} days in {time.perf_counter() - started:.0f} s")

    admin, _ = get_user_model().objects.get_or_create(username="bench-admin", is_superuser=True)
    member = get_user_model().objects.get(username="bench-1")
    month = today.strftime("%Y-%m")
    pages = [
        ("idle page, admin", admin, "/idle/"),
        ("idle page, member", member, "/idle/"),
        ("idle page, sorted by waste, one pool", admin, "/idle/?ordering=-wasted&pool=bench"),
        ("idle API, admin", admin, "/api/v1/idle-report/"),
        ("idle cards API", admin, "/api/v1/idle-cards/"),
        ("accounting page, admin", admin, f"/accounting/?month={month}"),
        ("accounting page, member", member, f"/accounting/?month={month}"),
        ("accounting API, admin", admin, f"/api/v1/accounting/?month={month}"),
    ]
    for label, user, url in pages:
        client = Client()
        client.force_login(user)
        client.get(url)  # warm
        walls, sqls = [], []
        for _ in range(args.runs):
            with measured() as m:
                response = client.get(url)
                if hasattr(response, "streaming_content"):
                    b"".join(response.streaming_content)
            assert response.status_code == 200, (url, response.status_code)
            walls.append(m["wall"])
            sqls.append(m["sql"])
        walls.sort()
        sqls.sort()
        page_ms, sql_ms = walls[len(walls) // 2] * 1000, sqls[len(sqls) // 2] * 1000
        print(
            f"{label:40s} page {page_ms:7.0f} ms (median of {args.runs}), "
            f"SQL {sql_ms:6.0f} ms, {m['queries']} queries"
        )
    client = Client()
    client.force_login(admin)
    with measured() as m:
        response = client.get("/idle/?format=csv")
        size = len(b"".join(response.streaming_content))
    print(f"idle CSV, all rows: {m['wall']:.2f} s, {size // 1024} KiB")
    return 0
