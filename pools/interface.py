"""Pools' public interface for the apps above it (quotas and requests, alerts, reports).

Models and choices are public too (``pools.models``, ``pools.choices``): the apps above
point at pools and leases. Everything else in pools is private.
"""

from __future__ import annotations

from pools.agent_reports import agent_report
from pools.failover import clear_cordon, drain_node, move_allocation, undrain_node
from pools.launch import launch_settings
from pools.placement import Ask, share_pct
from pools.reconcile import Drift, drift
from pools.release_plan import release_plan
from pools.services import (
    PlacementError,
    add_cards,
    could_ever_fit,
    place_lease,
    release_lease,
    resize_lease,
    slice_refusal,
)
from pools.signals import (
    AllocationMove,
    CardCordon,
    allocations_moved,
    card_cordoned,
    desired_state_changed,
)

__all__ = [
    "AllocationMove",
    "Ask",
    "CardCordon",
    "Drift",
    "PlacementError",
    "add_cards",
    "agent_report",
    "allocations_moved",
    "card_cordoned",
    "clear_cordon",
    "could_ever_fit",
    "desired_state_changed",
    "drain_node",
    "drift",
    "launch_settings",
    "move_allocation",
    "place_lease",
    "release_lease",
    "release_plan",
    "resize_lease",
    "share_pct",
    "slice_refusal",
    "undrain_node",
]
