"""bench/placement/pure.py: the pure placement on 10,000 cards about half full.

    python -m bench.placement.pure --cards 10000 --asks 5000

Builds a pool of 8-card nodes (A100 80 GB, no oversubscription) filled to about half with
mixed slices and some whole cards, then places a stream of mixed asks (mostly one slice,
some several across nodes, on one node, whole cards, with a label) one after another,
taking the capacity each placement chose and releasing an old one now and then so the pool
stays about half full. Times ``CardIndex.place`` (what a caller holding the cards uses)
and, on a sample, ``placement.place`` over the whole list. No database.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import replace

from bench.placement.common import percentile
from pools.placement import BINPACK, SPREAD, Ask, Card, place
from pools.placement_index import CardIndex

GIB = 1024
PHYSICAL = 81920


def half_full_pool(count: int, rnd: random.Random) -> list[Card]:
    cards = []
    for card_id in range(1, count + 1):
        node = (card_id - 1) // 8
        state = rnd.random()
        slices = compute = memory = 0
        whole = False
        if state < 0.05:
            slices, compute, memory, whole = 1, 100, PHYSICAL, True
        elif state > 0.35:
            slices = rnd.randint(1, 4)
            for _ in range(slices):
                compute += rnd.choice([5, 10, 20, 25, 30])
                memory += rnd.choice([2, 4, 8, 16]) * GIB
        cards.append(
            Card(
                id=card_id, node_id=node, node_name=f"node-{node:05d}", model="A100",
                compute_capacity=100, memory_capacity_mib=PHYSICAL, memory_physical_mib=PHYSICAL,
                compute_used=compute, memory_used_mib=memory, slices=slices, held_whole=whole,
                node_labels={"rack": f"r{node % 40}"},
            )
        )  # fmt: skip
    return cards


def mixed_ask(rnd: random.Random, policy: str) -> Ask:
    roll = rnd.random()
    base = Ask(
        compute_pct=rnd.choice([5, 10, 20, 25, 30, 50]),
        memory_mib=rnd.choice([1, 2, 4, 8, 16, 24]) * GIB,
        policy=policy,
    )
    if roll < 0.70:
        return base
    if roll < 0.80:
        return replace(base, count=rnd.randint(2, 8))
    if roll < 0.88:
        return replace(base, count=rnd.randint(2, 4), same_node=True)
    if roll < 0.94:
        return replace(base, count=rnd.randint(1, 2), whole_card=True)
    return replace(base, node_labels={"rack": f"r{rnd.randrange(40)}"})


def kind_of(ask: Ask) -> str:
    if ask.whole_card:
        return "whole cards"
    if ask.same_node:
        return "one node"
    if ask.node_labels:
        return "label"
    return "several" if ask.count > 1 else "one slice"


def taken(card: Card, ask: Ask, sign: int = 1) -> Card:
    compute, memory = ask.take(card)
    return replace(
        card, compute_used=card.compute_used + sign * compute,
        memory_used_mib=card.memory_used_mib + sign * memory, slices=card.slices + sign,
        held_whole=ask.whole_card and sign > 0,
    )  # fmt: skip


def run(count: int, asks: int, policy: str, seed: int) -> dict:
    rnd = random.Random(seed)
    pool = half_full_pool(count, rnd)
    started = time.perf_counter()
    index = CardIndex(pool)
    build_s = time.perf_counter() - started
    held: list[tuple[Ask, tuple[int, ...]]] = []
    times, cpu, reference, misses = [], [], [], 0
    updates: list[float] = []  # CPU of one card's update in the index
    by_kind: dict[str, list[float]] = {}
    for n in range(asks):
        ask = mixed_ask(rnd, policy)
        t0, c0 = time.perf_counter(), time.thread_time()
        chosen = index.place(ask)
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        by_kind.setdefault(kind_of(ask), []).append(cpu[-1])
        if n % 50 == 0:  # the plain function on the whole list, for comparison
            t0 = time.perf_counter()
            assert place(list(index.cards.values()), ask) == chosen
            reference.append(time.perf_counter() - t0)
        if chosen is None:
            misses += 1
        else:
            for card_id in chosen:
                card = taken(index.cards[card_id], ask)
                c0 = time.thread_time()
                index.update(card)
                updates.append(time.thread_time() - c0)
            held.append((ask, chosen))
        if len(held) > 50 and rnd.random() < 0.5:  # an old lease ends
            old_ask, old = held.pop(rnd.randrange(len(held)))
            for card_id in old:
                index.update(taken(index.cards[card_id], old_ask, -1))
    used = sum(c.compute_used for c in index.cards.values()) / (100 * count)
    return {
        "policy": policy, "cards": count, "asks": asks, "not_placed": misses,
        "compute_used_share_at_end": round(used, 3), "index_build_ms": round(build_s * 1e3, 1),
        "index_place_p50_ms": round(percentile(times, 0.5) * 1e3, 3),
        "index_place_p99_ms": round(percentile(times, 0.99) * 1e3, 3),
        "index_place_max_ms": round(max(times) * 1e3, 3),
        # CPU time of this thread: the same calls without the time other processes took.
        "index_place_cpu_p50_ms": round(percentile(cpu, 0.5) * 1e3, 3),
        "index_place_cpu_p99_ms": round(percentile(cpu, 0.99) * 1e3, 3),
        "index_update_cpu_p50_ms": round(percentile(updates, 0.5) * 1e3, 3),
        "index_update_cpu_p99_ms": round(percentile(updates, 0.99) * 1e3, 3),
        "index_place_cpu_p50_p99_ms_by_kind": {
            kind: [round(percentile(v, 0.5) * 1e3, 3), round(percentile(v, 0.99) * 1e3, 3)]
            for kind, v in sorted(by_kind.items())
        },
        "list_place_p50_ms": round(percentile(reference, 0.5) * 1e3, 2),
        "list_place_p99_ms": round(percentile(reference, 0.99) * 1e3, 2),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=10_000)
    parser.add_argument("--asks", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    results = [run(args.cards, args.asks, policy, args.seed) for policy in (BINPACK, SPREAD)]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
