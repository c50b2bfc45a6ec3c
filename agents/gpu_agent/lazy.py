"""A virtual node that collects only when someone asks: what makes 1,000 simulated nodes cheap.

The polling ``Collector`` reads its backend every interval whether or not anyone looks,
which is right for a real card (the driver's counters move anyway) but wasteful for a
simulator serving a thousand nodes nobody is watching. A ``LazyNode`` behaves as if it
collected on a fixed schedule of ``interval_s`` ticks, but does the work only for the
ticks a request lands in: the first request of a tick advances the simulation (by the
whole time since the last collection) and later requests in the same tick get the cached
bytes. So a node polled every interval still sees fresh data on every poll, exactly as
from a polling agent, and an idle node costs nothing.

Each JSON view and the /metrics text are encoded separately and only when first asked
for, since the portal wants one view and Prometheus the text.
"""

from __future__ import annotations

import logging
import time

from agents.gpu_agent import __version__
from agents.gpu_agent.backends.base import Backend
from agents.gpu_agent.collector import PodLabeller, collect_snapshot
from agents.gpu_agent.desired import DesiredStateStore
from agents.gpu_agent.metrics import render
from agents.gpu_agent.model import AgentInfo, NodeSnapshot
from agents.gpu_agent.snapshot_views import FULL, encode

log = logging.getLogger(__name__)


class LazyNode:
    """One node's backend, desired state and cached encodings; not thread-safe (one loop)."""

    def __init__(
        self,
        backend: Backend,
        interval_s: float,
        desired: DesiredStateStore | None = None,
        pods: PodLabeller | None = None,
        epoch: float | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.backend = backend
        self.interval_s = interval_s
        self.desired = desired if desired is not None else DesiredStateStore(None)
        self.pods = pods
        self._agent = AgentInfo(__version__, backend.name, interval_s)
        # Ticks count from here; nodes started together share a schedule, as a fleet
        # of agents started by one orchestrator roughly would.
        self._epoch = time.monotonic() if epoch is None else epoch
        self._tick = -1
        self._snapshot: NodeSnapshot | None = None
        self._monotonic_at = 0.0
        self._views: dict[str, bytes] = {}
        self._metrics: bytes | None = None
        self._failing = False

    def snapshot(self) -> NodeSnapshot | None:
        """The data for the current tick, collected now if this tick has none yet."""
        now = time.monotonic()
        tick = int((now - self._epoch) // self.interval_s)
        if tick != self._tick:
            # Set first: a failing backend is tried once per tick, not once per request.
            self._tick = tick
            self._collect()
        return self._snapshot

    def invalidate(self) -> None:
        """Collect again on the next request (new desired state changes the attribution)."""
        self._tick = -1

    def _collect(self) -> None:
        try:
            snapshot = collect_snapshot(self.backend, self._agent, self.desired, self.pods)
        except Exception:
            # As the Collector does: one traceback per failure streak, then quiet.
            if not self._failing:
                log.exception("collection failed for %s; serving the previous snapshot",
                              self.backend.hostname)  # fmt: skip
            self._failing = True
            return
        if self._failing:
            log.info("collection recovered for %s", self.backend.hostname)
        self._failing = False
        self._snapshot = snapshot
        self._monotonic_at = time.monotonic()
        self._views = {}
        self._metrics = None

    def snapshot_json(self, view: str = FULL) -> bytes | None:
        """One view (``snapshot_views.VIEWS``) of the current tick's data, as JSON bytes."""
        snapshot = self.snapshot()
        if snapshot is None:
            return None
        body = self._views.get(view)
        if body is None:
            body = self._views[view] = encode(snapshot, view)
        return body

    def metrics_text(self) -> bytes | None:
        if self.snapshot() is None:
            return None
        if self._metrics is None:
            assert self._snapshot is not None
            self._metrics = render(self._snapshot).encode()
        return self._metrics

    def last_collect_age_s(self) -> float | None:
        if self.snapshot() is None:
            return None
        return time.monotonic() - self._monotonic_at

    def gpu_count(self) -> int | None:
        # From the backend: a snapshot would collect before anyone asked.
        return getattr(self.backend, "gpu_count", None)

    def known_gpu_uuids(self) -> set[str] | None:
        """This node's card and MIG UUIDs, for checking desired state; None before any data."""
        snapshot = self.snapshot()
        if snapshot is None:
            return None
        uuids = set()
        for gpu in snapshot.gpus:
            if gpu.uuid:
                uuids.add(gpu.uuid)
            uuids.update(m.uuid for m in gpu.mig_devices or () if m.uuid)
        return uuids
