"""The demo's pools (``manage.py demo``): one rule pool over the simulated NVIDIA cards,
one over the simulated Ascend and Hygon cards, and the
slices its allocations were on at any moment, for the demo's history. The slices
themselves come through GPU requests (``quotas.demo``). Wired in by the project's demo
command."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Q

from agents.gpu_agent.desired import Slice
from agents.models import Node
from pools import configuration, sync
from pools.models import Allocation, Pool

POOL_SLUG = "demo"


def seed(admin, node_labels: dict[str, str]) -> Pool:
    """The demo pool, created once (as ``admin``, audited) and kept across restarts."""
    pool = Pool.objects.filter(slug=POOL_SLUG).first()
    if pool is None:
        pool = configuration.create_pool(
            {
                "name": "Demo", "slug": POOL_SLUG,
                "description": "Every simulated card, compute oversubscribed twice.",
                "match_labels": node_labels, "compute_ratio": Decimal(2),
                "memory_ratio": Decimal("1.5"),
            },
            actor=admin,
        )  # fmt: skip
    return pool


DOMESTIC_SLUG = "domestic"


def seed_domestic(admin, node_labels: dict[str, str]) -> Pool:
    """The pool of the demo's Ascend and Hygon cards (a mixed fleet beside the NVIDIA
    one), by their nodes' label, created once like the demo pool; no oversubscription."""
    pool = Pool.objects.filter(slug=DOMESTIC_SLUG).first()
    if pool is None:
        pool = configuration.create_pool(
            {
                "name": "Ascend and Hygon", "slug": DOMESTIC_SLUG,
                "description": "Simulated Huawei Ascend 910B and Hygon DCU cards.",
                "match_labels": node_labels,
            },
            actor=admin,
        )  # fmt: skip
    return pool


def send_desired_state(node_names: Iterable[str]) -> None:
    """Send each node's agent its slices now, an empty list before any (``pools.sync``),
    rather than after the first poll: a simulated node the portal manages runs its
    slices' jobs and nothing else (``agents/gpu_agent/backends/sim_jobs.py``), so even its
    first reading shows no made-up user."""
    for node_id in Node.objects.filter(name__in=list(node_names)).values_list("pk", flat=True):
        sync.sync_node(node_id)


@dataclass(frozen=True)
class HeldSlice:
    """An allocation as its node's agent held it, from when to when (None: still held)."""

    node: str
    slice: Slice
    placed_at: datetime
    released_at: datetime | None

    def held_at(self, moment: datetime) -> bool:
        return self.placed_at <= moment and (self.released_at is None or moment < self.released_at)


def held_slices(node_names: Iterable[str], since: datetime) -> list[HeldSlice]:
    """The allocations on these nodes' cards held at some time since ``since``, each as
    the slice its agent was sent (``pools.sync.desired_slices``: id, size and owner)."""
    rows = (
        Allocation.objects.filter(gpu__node__name__in=list(node_names), placed_at__isnull=False)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=since))
        .order_by("pk")
        .values_list(
            "pk", "gpu__node__name", "gpu__uuid", "compute_pct", "memory_mib",
            "lease__unix_user", "placed_at", "released_at",
        )
    )  # fmt: skip
    return [
        HeldSlice(node, Slice(f"alloc-{pk}", uuid, compute, memory, owner), placed, released)
        for pk, node, uuid, compute, memory, owner, placed, released in rows
    ]
