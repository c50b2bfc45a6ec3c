"""Pools' public interface for the apps above it (quotas and requests, alerts, reports).

Models and choices are public too (``pools.models``, ``pools.choices``): the apps above
point at pools and leases. Everything else in pools is private.
"""

from __future__ import annotations

from pools.placement import Ask
from pools.services import (
    PlacementError,
    could_ever_fit,
    place_lease,
    release_lease,
    resize_lease,
)
from pools.signals import desired_state_changed

__all__ = [
    "Ask",
    "PlacementError",
    "could_ever_fit",
    "desired_state_changed",
    "place_lease",
    "release_lease",
    "resize_lease",
]
