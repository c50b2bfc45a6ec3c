"""The demo's pool (``manage.py demo``): one rule pool over the simulated cards and, once
their first readings arrive, a few slices placed for a demo developer, so the pool page's
per-card map has something to show. Wired in by the project's demo command."""

from __future__ import annotations

import logging
from decimal import Decimal

from django.contrib.auth import get_user_model

from pools import membership
from pools.choices import LeaseState
from pools.models import Pool
from pools.placement import Ask
from pools.services import PlacementError, place_lease
from telemetry.interface import poll_cycle_recorded

log = logging.getLogger(__name__)

POOL_SLUG = "demo"
DEVELOPER = "developer"
# (label, ask): shared slices of several sizes, and one card held whole.
SLICES = (
    ("notebook", Ask(compute_pct=30, memory_mib=8 * 1024)),
    ("training", Ask(count=2, compute_pct=50, memory_mib=20 * 1024)),
    ("inference", Ask(compute_pct=25, memory_mib=10 * 1024)),
    ("benchmark", Ask(whole_card=True)),
)


def seed(admin, node_labels: dict[str, str]) -> Pool:
    """The demo pool, created once (as ``admin``, audited) and kept across restarts."""
    pool = Pool.objects.filter(slug=POOL_SLUG).first()
    if pool is None:
        pool = membership.create_pool(
            {
                "name": "Demo", "slug": POOL_SLUG,
                "description": "Every simulated card, compute oversubscribed twice.",
                "match_labels": node_labels, "compute_ratio": Decimal(2),
                "memory_ratio": Decimal("1.5"),
            },
            actor=admin,
        )  # fmt: skip
    return pool


def place_slices_when_cards_arrive(pool_id: int) -> None:
    """After the poll cycle that brings the pool its cards (they join in pools' own
    receiver, connected first), place the demo slices once; nothing if some are placed."""

    def place(sender, cycle, **kwargs) -> None:
        pool = Pool.objects.filter(pk=pool_id).first()
        if pool is None or pool.leases.filter(state=LeaseState.ACTIVE).exists():
            poll_cycle_recorded.disconnect(place, dispatch_uid="pools.demo")
            return
        if not pool.cards.exists():
            return
        poll_cycle_recorded.disconnect(place, dispatch_uid="pools.demo")
        developer, _ = get_user_model().objects.get_or_create(username=DEVELOPER)
        for label, ask in SLICES:
            try:
                place_lease(pool, ask, holder=developer, unix_user=DEVELOPER, label=label)
            except PlacementError as exc:
                log.info("demo slice %s not placed: %s", label, exc)

    poll_cycle_recorded.connect(place, weak=False, dispatch_uid="pools.demo")
