"""bench/alerts: rule evaluation cost per poll cycle, 8,000 GPUs and 30 rules.

    python -m bench.alerts                      # the pure evaluation only
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.alerts --hook

The pure part times ``alerts.evaluate.findings`` over 1,000 nodes x 8 cards of readings
(a few cards hot, a few faulty, some processes outside their slices) against 30 rules
(metric, card-event and node rules; all, pool, node and tenant scopes). ``--hook`` also
times what the poll-cycle receiver does (``alerts.sources.metrics.evaluate_cycle``), per chunk of
250 nodes as the poller sends them: reading the latest readings from Redis, the
evaluation, the for-duration state in Redis, on a steady fleet (nothing new fires). It
writes 1,000 nodes and 8,000 cards into the database: use a scratch one. CPU time is
``time.process_time``; the median of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import dataclass

NODES, CARDS = 1000, 8
CHUNK = 250


@dataclass(frozen=True, slots=True)
class _Card:
    values: dict


@dataclass(frozen=True, slots=True)
class _Node:
    cards: dict
    violations: tuple = ()


def rules():
    from alerts.evaluate import RuleSpec

    conditions = [
        ("temperature_c", 85), ("temperature_c", 90), ("memory_used_pct", 95),
        ("utilization_gpu_pct", 99), ("power_pct", 98), ("xid", None),
        ("ecc_uncorrectable", None), ("gpu_lost", None), ("node_offline", None),
        ("process_unallocated", None), ("process_over_slice", None),
    ]  # fmt: skip
    scopes = [("all", None), ("pool", 3), ("node", 17), ("tenant", 5)]
    out = []
    for n in range(30):
        condition, threshold = conditions[n % len(conditions)]
        scope, scope_id = scopes[n % len(scopes)]
        out.append(RuleSpec(n + 1, f"rule-{n}", f"Rule {n}", condition, "gt",
                            threshold and threshold - (n // len(conditions)), 300,
                            scope_kind=scope, scope_id=scope_id))  # fmt: skip
    return out


def fleet(seed: int = 1):
    from alerts.evaluate import Card

    rng = random.Random(seed)
    readings, cards = {}, {}
    for node in range(1, NODES + 1):
        node_cards = {}
        for index in range(CARDS):
            uuid = f"GPU-{node:04d}-{index}"
            hot = rng.random() < 0.002
            values = {
                "index": index, "uuid": uuid, "temperature_c": 92 if hot else rng.randint(30, 80),
                "memory_used_mib": rng.randint(0, 80000), "memory_total_mib": 81920,
                "utilization_gpu_pct": rng.randint(0, 100), "power_w": rng.uniform(60, 650),
                "power_limit_w": 700.0, "xid_last": 79 if rng.random() < 0.0005 else 0,
                "ecc_uncorrected_total": 0, "health": "ok",
            }  # fmt: skip
            node_cards[uuid] = _Card(values)
            cards[uuid] = Card(node * 10 + index, index, node, node % 10,
                               frozenset({node % 20}))  # fmt: skip
        violations = ()
        if rng.random() < 0.01:
            violations = ({"kind": "unallocated", "gpu_uuid": f"GPU-{node:04d}-0",
                           "user": "mallory", "memory_used_mib": 900},)  # fmt: skip
        readings[node] = _Node(node_cards, violations)
    return readings, cards


def cpu_ms(fn, rounds: int) -> tuple[float, float]:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        fn()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times), max(times)


def pure(rounds: int) -> None:
    from alerts.evaluate import findings

    specs = rules()
    readings, cards = fleet()
    found = findings(specs, readings, cards, failed=(7, 8))
    median, worst = cpu_ms(lambda: findings(specs, readings, cards, failed=(7, 8)), rounds)
    print(f"pure evaluation, {NODES * CARDS} GPUs x {len(specs)} rules: "
          f"{median:.1f} ms CPU median, {worst:.1f} ms worst, {len(found)} findings")  # fmt: skip


def hook(rounds: int) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    from agents.models import GPU, Node
    from alerts.models import Rule
    from alerts.sources import metrics
    from telemetry import readings as telemetry_readings
    from telemetry.interface import PollCycle

    call_command("migrate", verbosity=0)
    Node.objects.filter(name__startswith="bench-alerts-").delete()
    nodes = Node.objects.bulk_create(
        [Node(name=f"bench-alerts-{n:04d}", agent_url=f"http://10.0.{n // 250}.{n % 250}:9400")
         for n in range(NODES)])  # fmt: skip
    readings, _cards = fleet()
    GPU.objects.bulk_create(
        [GPU(node=node, index=i, uuid=f"GPU-B{node.pk}-{i}", model="NVIDIA H100")
         for node in nodes for i in range(CARDS)], batch_size=2000)  # fmt: skip
    snapshots = {}
    for node, reading in zip(nodes, readings.values(), strict=True):
        gpus = [{**card.values, "uuid": f"GPU-B{node.pk}-{card.values['index']}"}
                for card in reading.cards.values()]  # fmt: skip
        snapshots[node.pk] = {"hostname": node.name, "gpus": gpus}
    specs = rules()
    Rule.objects.exclude(key__startswith="bench-").update(enabled=False)
    Rule.objects.filter(key__startswith="bench-").delete()
    Rule.objects.bulk_create([
        Rule(key=f"bench-{s.id}", name=s.name, condition=s.condition, threshold=s.threshold,
             for_seconds=300, scope_kind="all") for s in specs])  # fmt: skip
    metrics.forget_caches()
    ids = [n.pk for n in nodes]
    chunks = [tuple(ids[i : i + CHUNK]) for i in range(0, len(ids), CHUNK)]
    now = timezone.now()

    def one_cycle() -> None:
        for chunk in chunks:
            metrics.evaluate_cycle(PollCycle(at=now, answered=chunk))

    telemetry_readings.store_latest(snapshots)
    one_cycle()  # warm: rules, topology, pending states written
    now += timedelta(seconds=5)
    median, worst = cpu_ms(one_cycle, rounds)
    print(f"poll-cycle hook, {len(chunks)} chunks of {CHUNK} nodes, {NODES * CARDS} GPUs x "
          f"{len(specs)} rules (latest readings from Redis, state in Redis): "
          f"{median:.1f} ms CPU median, {worst:.1f} ms worst")  # fmt: skip
    from telemetry.interface import latest

    median, worst = cpu_ms(lambda: [latest(chunk) for chunk in chunks], rounds)
    print(f"  of which telemetry.interface.latest for the same nodes: {median:.1f} ms CPU median")
    Rule.objects.filter(key__startswith="bench-").delete()
    Rule.objects.filter(builtin=True).update(enabled=True)
    Node.objects.filter(name__startswith="bench-alerts-").delete()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--hook", action="store_true", help="also time the poll-cycle hook")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    pure(args.rounds)
    if args.hook:
        hook(args.rounds)
    return 0
