"""bench/ingest/rollups: the rollup path alone, buffer per cycle and flush per minute.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench \\
    python -m bench.ingest.rollups --gpus 8000 --cycles 12

No agents: each cycle's answered snapshots are built in this process (per GPU the
fields the rollups read, a few more for realism, and 0-2 processes), handed to
``sample_buffer.buffer_samples`` as a poll cycle does, and every finished minute is then
flushed with ``rollups.flush`` as beat does. Reported: CPU per cycle of the buffer
(this process + Redis), CPU per minute of the flush (this process + its PostgreSQL
backend, read from /proc as bench/ingest/run.py does), and what that makes per GPU
sample. The first flush also writes the hours (the warm-up); the steady state is the
mean of the next ones, the flushes that fold minutes into their hours (PostgreSQL,
every ``rollups.FOLD_EVERY`` minutes) included; a last flush merges one late cycle
into a minute already written. The database named in DATABASE_URL is migrated and
emptied: use a scratch one.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.ingest.run import proc_cpu_s, production_stack, self_cpu_s

USERS = [f"user{i:02d}" for i in range(40)]


def make_jobs(rng: random.Random, uuids: list[str]) -> dict[str, list[tuple[str, bool]]]:
    """Who runs what where: 0-2 processes per card, of one or two users, for the whole run
    (jobs outlive minutes); half of them with a per-process SM utilization."""
    return {
        uuid: [(rng.choice(USERS), rng.random() < 0.5) for _ in range(rng.choice((0, 1, 1, 2)))]
        for uuid in uuids
    }


def present(fields: dict) -> dict:
    """As the agent sends them: a field not read is left out, not null."""
    return {k: v for k, v in fields.items() if v is not None}


def make_cycle(
    rng: random.Random, nodes: list[tuple[int, list[str]]], jobs: dict[str, list]
) -> dict[int, dict]:
    """One cycle's answered snapshots, shaped like the agent's (fields the rollups skip too)."""
    answered = {}
    for node_id, uuids in nodes:
        gpus = []
        for index, uuid in enumerate(uuids):
            util = rng.randint(0, 100)
            used = rng.randint(2, 80_000)
            processes = []
            for pid, (user, sm) in enumerate(jobs[uuid]):
                processes.append(present({
                    "pid": 10_000 + pid, "user": user, "uid": 1000 + pid,
                    "memory_used_mib": used // 2, "command": "python train.py",
                    "sm_util_pct": rng.randint(0, 100) if sm else None,
                }))  # fmt: skip
            gpus.append(present({
                "index": index, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81_559, "memory_used_mib": used,
                "memory_free_mib": 81_559 - used, "utilization_gpu_pct": util,
                "utilization_memory_pct": util // 2,
                "temperature_c": rng.randint(30, 85),
                # A card now and then without a power reading (absent, not zero).
                "power_w": round(rng.uniform(60, 700), 3) if rng.random() > 0.01 else None,
                "power_limit_w": 700, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
                "pcie_tx_bytes_per_s": rng.randint(0, 10**9), "ecc_corrected_total": 0,
                "processes": processes,
            }))  # fmt: skip
        answered[node_id] = {"hostname": f"n{node_id}", "gpus": gpus}
    return answered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=8000)
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=12, help="poll cycles per minute")
    parser.add_argument("--minutes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)

    redis_client = production_stack("bench/ingest/rollups")
    from django.db import connection

    from agents.models import GPU, Node
    from telemetry import rollups, sample_buffer
    from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute

    tables = [m._meta.db_table for m in (GpuMinute, GpuHour, OwnerMinute, OwnerHour)]
    # The claims merged and how far minutes are folded into hours go too.
    tables += {"telemetry_rollupclaim"} & set(connection.introspection.table_names())
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(tables)}")

    node_count = -(-args.gpus // args.per_node)
    nodes = Node.objects.bulk_create(Node(name=f"bench-{i:05d}") for i in range(node_count))
    cards = GPU.objects.bulk_create(
        GPU(node=node, index=i, uuid=f"GPU-{node.pk}-{i}", model="H100")
        for node in nodes for i in range(args.per_node)
    )[: args.gpus]  # fmt: skip
    gpu_ids = {g.uuid: g.pk for g in cards}
    layout: dict[int, list[str]] = {}
    for g in cards:
        layout.setdefault(g.node_id, []).append(g.uuid)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend_pid = cursor.fetchone()[0]

    def redis_cpu() -> float:
        info = redis_client.info("cpu")
        return info["used_cpu_user"] + info["used_cpu_sys"]

    rng = random.Random(args.seed)
    jobs = make_jobs(rng, list(gpu_ids))
    start = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    buffers, flushes = [], []
    for minute in range(args.minutes + 1):
        at = start + timedelta(minutes=minute)
        late = minute == args.minutes  # one more cycle, into the minute before
        for cycle in range(1 if late else args.cycles):
            answered = make_cycle(rng, list(layout.items()), jobs)
            moment = at - timedelta(seconds=1) if late else at + timedelta(seconds=5 * cycle)
            gc.collect()  # the garbage of building the cycle is not the buffer's
            cpu0, redis0 = self_cpu_s(), redis_cpu()
            sample_buffer.buffer_samples(answered, gpu_ids, moment)
            if not late:
                buffers.append({"cpu_s": self_cpu_s() - cpu0, "redis_cpu_s": redis_cpu() - redis0})
        wall0, cpu0, pg0 = time.monotonic(), self_cpu_s(), proc_cpu_s(backend_pid)
        written = rollups.flush(at + timedelta(minutes=1, seconds=1))
        flushes.append({
            "minute": minute, "late": late, "gpu_minutes": written,
            "wall_s": round(time.monotonic() - wall0, 3),
            "cpu_s": round(self_cpu_s() - cpu0, 3),
            "pg_cpu_s": round(proc_cpu_s(backend_pid) - pg0, 3),
        })  # fmt: skip

    steady = [f for f in flushes[1:] if not f["late"]] or flushes[:1]
    buffer_cpu = statistics.mean(b["cpu_s"] for b in buffers)
    redis_cpu_s = statistics.mean(b["redis_cpu_s"] for b in buffers)
    # Mean, not median: some flushes also fold minutes into hours (every few minutes).
    flush_py = round(statistics.mean(f["cpu_s"] for f in steady), 3)
    flush_pg = round(statistics.mean(f["pg_cpu_s"] for f in steady), 3)
    per_cycle = buffer_cpu + redis_cpu_s + (flush_py + flush_pg) / args.cycles
    result = {
        "gpus": len(cards),
        "cycles_per_minute": args.cycles,
        "buffer_cpu_per_cycle_s": round(buffer_cpu, 4),
        "buffer_cpu_per_cycle_min_s": round(min(b["cpu_s"] for b in buffers), 4),
        "redis_cpu_per_cycle_s": round(redis_cpu_s, 4),
        "flush_per_minute_steady": {"cpu_s": flush_py, "pg_cpu_s": flush_pg,
                                    "total_s": round(flush_py + flush_pg, 3)},
        "flushes": flushes,
        "rollup_cpu_per_gpu_sample_us": round(per_cycle / len(cards) * 1e6, 2),
        "rows": {m.__name__: m.objects.count()
                 for m in (GpuMinute, GpuHour, OwnerMinute, OwnerHour)},
    }  # fmt: skip
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
