"""The pools' part of the fleet dashboard: each pool's capacity as bars counted in cards
("3.55 / 64 GPUs", not "355 / 6400 %"), and the summary row's count of allocated cards;
for those who see every lease or manage pools (registered in ``PoolsConfig.ready``).
One aggregate query each, whatever the count of pools and cards."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Q, Sum
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.translation import gettext as _

from pools.models import Pool, PoolCard
from pools.permissions import can_manage_pools, lease_filter
from pools.templatetags.pools_ui import cards, gib
from telemetry.interface import DashboardFigure

# The panel shows this many pools, the fullest first; the pool list has them all.
MAX_POOLS = 8


def sees_capacity(user) -> bool:
    """Pool managers and whoever sees every lease (platform admins among them)."""
    if not user.is_authenticated:
        return False
    rule = lease_filter(user)
    return can_manage_pools(user) or (rule is not None and not rule)


@dataclass(frozen=True, slots=True)
class CapacityBar:
    name: str
    url: str
    cards: int
    compute_allocated_pct: int  # in whole-card percent: 355 is 3.55 cards
    compute_capacity_pct: int
    memory_allocated_mib: int
    memory_capacity_mib: int

    @property
    def compute_text(self) -> str:
        """The pool's compute in cards: "3.55 / 64"."""
        return f"{cards(self.compute_allocated_pct)} / {cards(self.compute_capacity_pct)}"

    @property
    def memory_text(self) -> str:
        return f"{gib(self.memory_allocated_mib)} / {gib(self.memory_capacity_mib)}"

    @property
    def share(self) -> float:
        """How full the pool's compute is, 0..1 (the bar)."""
        if not self.compute_capacity_pct:
            return 0.0
        return min(1.0, self.compute_allocated_pct / self.compute_capacity_pct)


def capacity_bars(limit: int = MAX_POOLS) -> tuple[list[CapacityBar], int]:
    """The fullest ``limit`` pools' bars, and how many pools there are in all."""
    rows = Pool.objects.annotate(
        card_count=Count("cards"),
        compute_capacity=Sum("cards__compute_capacity", default=0),
        compute_allocated=Sum("cards__compute_allocated", default=0),
        memory_capacity=Sum("cards__memory_capacity_mib", default=0),
        memory_allocated=Sum("cards__memory_allocated_mib", default=0),
    ).values(
        "name",
        "slug",
        "card_count",
        "compute_capacity",
        "compute_allocated",
        "memory_capacity",
        "memory_allocated",
    )
    bars = [
        CapacityBar(
            name=r["name"],
            url=reverse("pools:pool_detail", args=[r["slug"]]),
            cards=r["card_count"],
            compute_allocated_pct=r["compute_allocated"],
            compute_capacity_pct=r["compute_capacity"],
            memory_allocated_mib=r["memory_allocated"],
            memory_capacity_mib=r["memory_capacity"],
        )
        for r in rows
    ]
    bars.sort(key=lambda bar: (-bar.share, bar.name))
    return bars[:limit], len(bars)


def allocated_cards() -> tuple[int, int, int]:
    """Cards with compute allocated (a slice, or held whole); and the compute allocated and
    offered over all pools, in whole-card percent."""
    held = (
        PoolCard.objects.filter(Q(compute_allocated__gt=0) | Q(slices__gt=0) | Q(held_whole=True))
        .values("gpu_id")
        .distinct()
        .count()
    )
    sums = PoolCard.objects.aggregate(
        allocated=Sum("compute_allocated", default=0), capacity=Sum("compute_capacity", default=0)
    )
    return held, sums["allocated"], sums["capacity"]


def dashboard_panel(request: HttpRequest) -> str:
    if not sees_capacity(request.user):
        return ""
    bars, total = capacity_bars()
    return render_to_string(
        "pools/_dashboard_panel.html", {"bars": bars, "more": total - len(bars)}, request=request
    )


def dashboard_figures(request: HttpRequest) -> list[DashboardFigure]:
    if not sees_capacity(request.user):
        return []
    held, allocated, capacity = allocated_cards()
    detail = _("%(allocated)s of %(capacity)s GPUs' compute") % {
        "allocated": cards(allocated),
        "capacity": cards(capacity),
    }
    return [
        DashboardFigure(
            _("Allocated"), str(held), detail=detail, order=20, url=reverse("pools:pool_list")
        )
    ]
