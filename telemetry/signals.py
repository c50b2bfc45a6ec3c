"""What telemetry tells other apps: sent once each poll cycle's records are committed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.dispatch import Signal


@dataclass(frozen=True, slots=True)
class PollCycle:
    """One recorded poll cycle (or one chunk of it, on a fleet split across workers)."""

    at: datetime
    answered: tuple[int, ...]  # node ids whose agents answered
    failed: dict[int, str] = field(default_factory=dict)  # node id -> error
    went_offline: tuple[str, ...] = ()  # node names
    came_back: tuple[int, ...] = ()  # node ids that answered after being offline


# Sent with ``cycle=PollCycle`` after the cycle's transaction commits (never for one
# rolled back). Receivers run in the poller's worker: keep them short, or queue a task.
poll_cycle_recorded = Signal()
