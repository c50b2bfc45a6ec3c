"""Telemetry's public interface: what the other apps (pools, quotas, alerts, reports, the
API) may call. Everything else in the telemetry app, its Redis keys included, is private;
tests/test_boundaries.py fails when another app reaches past this module.

Readings are the reading schema's fields (``agents.gpu_agent.schema``), units in the
names; a field a card did not report is absent, never zero. Usage over a window comes
from the 1-minute rollups (up to 36 hours) or the 1-hour ones (longer windows).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agents.gpu_agent.schema import GPU_FIELDS, HISTORY_GPU_FIELDS, HISTORY_PROCESS_FIELDS
from telemetry import history, metrics, readings
from telemetry.attributed import (
    MINUTE_RECORD,
    AttributedUse,
    Attribution,
    attributed_minutes,
    attributed_use,
    owners_last_seen,
    owners_seen,
)
from telemetry.changes import merged_since
from telemetry.changes import snapshot as rollup_snapshot
from telemetry.heatmap import BUSY_UTIL_PCT
from telemetry.interval_usage import Interval, IntervalUsage, interval_usage
from telemetry.panels import (
    ALERTS_ORDER,
    APPROVALS_ORDER,
    POOLS_ORDER,
    TENANTS_ORDER,
    DashboardDetour,
    DashboardFigure,
    DashboardFigures,
    DashboardPanel,
    add_dashboard_detour,
    add_dashboard_figures,
    add_dashboard_panel,
    dashboard_panels,
)
from telemetry.permissions import OwnerGrant, grant_owners
from telemetry.signals import PollCycle, poll_cycle_recorded

__all__ = [
    "ALERTS_ORDER",
    "APPROVALS_ORDER",
    "BUSY_UTIL_PCT",
    "GPU_FIELDS",
    "HISTORY_GPU_FIELDS",
    "HISTORY_PROCESS_FIELDS",
    "MINUTE_RECORD",
    "POOLS_ORDER",
    "TENANTS_ORDER",
    "AttributedUse",
    "Attribution",
    "CardReading",
    "CardUsage",
    "DashboardDetour",
    "DashboardFigure",
    "DashboardFigures",
    "DashboardPanel",
    "Interval",
    "IntervalUsage",
    "NodeReading",
    "OwnerGrant",
    "OwnerUsage",
    "PollCycle",
    "add_dashboard_detour",
    "add_dashboard_figures",
    "add_dashboard_panel",
    "attributed_minutes",
    "attributed_use",
    "card_usage",
    "dashboard_panels",
    "grant_owners",
    "interval_usage",
    "last_poll_cycle",
    "latest",
    "merged_since",
    "owner_usage",
    "owners_last_seen",
    "owners_seen",
    "poll_cycle_recorded",
    "rollup_snapshot",
]


@dataclass(frozen=True, slots=True)
class CardReading:
    uuid: str
    values: dict[str, Any]  # the schema's card fields that were reported
    processes: tuple[dict[str, Any], ...]  # each the schema's process fields reported


@dataclass(frozen=True, slots=True)
class NodeReading:
    node_id: int
    seen_at: datetime  # when the portal last heard from the node's agent
    collected_at: float | None  # the agent's own clock, seconds since the epoch
    cards: dict[str, CardReading]  # by UUID
    # The agent's slices report (the reading schema's ALLOCATION_FIELDS and VIOLATION_FIELDS,
    # checked): empty until the portal sent the node a desired state.
    allocations: tuple[dict[str, Any], ...] = ()
    violations: tuple[dict[str, Any], ...] = ()
    desired_generation: int | None = None  # the generation the report was built from


@dataclass(frozen=True, slots=True)
class CardUsage:
    gpu_id: int
    samples: int
    values: dict[str, float | None]  # per history field: ``<column>_avg``/``_max`` columns


@dataclass(frozen=True, slots=True)
class OwnerUsage:
    gpu_id: int
    owner: str  # the process owner (a Unix user)
    samples: int
    values: dict[str, float | None]


def _values(card: dict[str, Any]) -> dict[str, Any]:
    # A copy less its processes: dict() copies in C, a comprehension per key cost 8,000
    # cards a cycle about 10 ms.
    values = dict(card)
    values.pop("processes", None)
    return values


def latest(node_ids: Iterable[int]) -> dict[int, NodeReading]:
    """The latest readings of these nodes; nodes without fresh readings are left out."""
    out = {}
    for node_id, stored in readings.latest_for(node_ids).items():
        cards = {
            uuid: CardReading(
                uuid=uuid, values=_values(card), processes=tuple(card.get("processes") or ())
            )
            for uuid, card in stored.get("gpus", {}).items()
        }
        out[node_id] = NodeReading(
            node_id=node_id,
            seen_at=datetime.fromtimestamp(stored["stored_at"], tz=UTC),
            collected_at=stored.get("collected_at"),
            cards=cards,
            allocations=tuple(stored.get("allocations") or ()),
            violations=tuple(stored.get("violations") or ()),
            desired_generation=stored.get("desired_generation"),
        )
    return out


def last_poll_cycle() -> datetime | None:
    """When the poller last finished a cycle (or a chunk of one), in any worker; None when
    none is recorded (no poll yet, or Redis lost its data). Beat queues a poll every
    GPU_POLL_INTERVAL, so an old answer means beat or the ``polls`` worker is not running."""
    at = metrics.last_poll_at()
    return None if at is None else datetime.fromtimestamp(at, tz=UTC)


def card_usage(gpu_ids: Iterable[int], start: datetime, end: datetime) -> dict[int, CardUsage]:
    """What each card did over ``[start, end)``: sample-weighted averages and peaks."""
    return {
        gpu_id: CardUsage(gpu_id=gpu_id, samples=row.pop("samples"), values=row)
        for gpu_id, row in history.usage_by_card(gpu_ids, start, end).items()
    }


def owner_usage(gpu_ids: Iterable[int], start: datetime, end: datetime) -> list[OwnerUsage]:
    """What each process owner used of each of these cards over ``[start, end)``."""
    return [
        OwnerUsage(
            gpu_id=row.pop("gpu_id"),
            owner=row.pop("owner"),
            samples=row.pop("samples"),
            values=row,
        )
        for row in history.usage_by_card_owner(gpu_ids, start, end)
    ]
