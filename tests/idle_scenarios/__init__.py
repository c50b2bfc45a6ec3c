"""Simulated workloads for the idle tests: a scenario module names allocations (whole
cards or slices, who holds them, since when) and what each used minute by minute; ``load``
builds them through the request services and writes the minute rollups they imply."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import ModuleType

from django.utils import timezone

from pools.models import Allocation
from quotas.models import GpuRequest
from quotas.requests.services import create_request
from telemetry.models import GpuMinute, OwnerMinute
from tests.factories import MembershipFactory, Team, gpu_team


@dataclass
class Loaded:
    team: Team
    now: datetime
    allocations: dict[str, Allocation]  # by the scenario's names
    holders: dict[str, object]


def scenario(name: str) -> ModuleType:
    return importlib.import_module(f"tests.idle_scenarios.{name}")


def load(module: ModuleType, run_commits) -> Loaded:
    """Place each allocation as an auto-approved request (placed ``placed`` minutes ago)
    and write its card's (and owner's) minutes from its ``use`` spans."""
    now = timezone.now().replace(second=0, microsecond=0)
    team = gpu_team(
        cards=module.CARDS, auto_approve_vgpus=1, auto_approve_compute_pct=100,
        auto_approve_hours=1000, limit_gpu_hours=0, guaranteed_gpu_hours=0,
    )  # fmt: skip
    allocations, holders = {}, {}
    for name, spec in module.ALLOCATIONS.items():
        holder = MembershipFactory(
            tenant=team.tenant, user__username=f"u-{name}", user__password=None
        ).user
        ask = {"whole_card": True} if spec.get("whole_card") else {
            "compute_pct": spec["compute_pct"], "memory_mib": spec["memory_mib"]}  # fmt: skip
        req = run_commits(lambda h=holder, a=ask: create_request(h, **team.ask(**a)))
        placed = now - timedelta(minutes=spec["placed"])
        GpuRequest.objects.filter(pk=req.pk).update(placed_at=placed)
        alloc = Allocation.objects.get(lease__gpu_request=req)
        Allocation.objects.filter(pk=alloc.pk).update(placed_at=placed)
        alloc.refresh_from_db()
        allocations[name], holders[name] = alloc, holder
    _minutes(module, allocations, holders, now)
    return Loaded(team, now, allocations, holders)


def _minutes(module, allocations, holders, now: datetime) -> None:
    cards: dict[tuple[int, datetime], list[float]] = {}
    owners = []
    for name, spec in module.ALLOCATIONS.items():
        alloc = allocations[name]
        for start, end, util, memory in spec["use"]:
            for ago in range(end + 1, start + 1):  # minutes ``ago`` in (end, start]
                at = now - timedelta(minutes=ago)
                util_mem = cards.setdefault((alloc.gpu_id, at), [0.0, 0.0])
                util_mem[0] = max(util_mem[0], util)
                util_mem[1] += memory
                if memory:
                    owners.append(OwnerMinute(
                        gpu_id=alloc.gpu_id, owner=holders[name].get_username(), bucket=at,
                        samples=12, memory_used_avg_mib=memory, memory_used_max_mib=memory,
                    ))  # fmt: skip
    # Every card is read every minute of the scenario, used or not.
    gpu_ids = {a.gpu_id for a in allocations.values()}
    for gpu_id in gpu_ids:
        for ago in range(1, module.READ_MINUTES + 1):
            cards.setdefault((gpu_id, now - timedelta(minutes=ago)), [0.0, 0.0])
    GpuMinute.objects.bulk_create(
        GpuMinute(gpu_id=g, bucket=at, samples=12, util_avg=u, util_max=u,
                  memory_used_avg_mib=m, memory_used_max_mib=m)
        for (g, at), (u, m) in cards.items()
    )  # fmt: skip
    OwnerMinute.objects.bulk_create(owners)
