"""Shared by the placement benchmarks: percentiles, and the stream of mixed asks."""

from __future__ import annotations

import random
from dataclasses import replace

from pools.placement import Ask

GIB = 1024
RACKS = 40  # the benchmark's nodes carry the label rack=r0..r39


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def mixed_ask(rnd: random.Random, policy: str) -> Ask:
    """70 % one slice, 10 % 2-8 slices across nodes, 8 % 2-4 on one node, 6 % 1-2 whole
    cards, 6 % one slice on a rack (a node label)."""
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
    return replace(base, node_labels={"rack": f"r{rnd.randrange(RACKS)}"})


def kind_of(ask: Ask) -> str:
    if ask.whole_card:
        return "whole cards"
    if ask.same_node:
        return "one node"
    if ask.node_labels:
        return "label"
    return "several" if ask.count > 1 else "one slice"
