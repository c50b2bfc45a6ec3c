"""Polls a backend on a fixed period and keeps the latest result ready to serve.

HTTP handlers (``server.py``, on the loop thread) read only what this thread
published, so a slow or hung driver call delays the data, never the portal's requests.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Protocol

from agents.gpu_agent import __version__
from agents.gpu_agent.attribution import attribute
from agents.gpu_agent.backends.base import Backend
from agents.gpu_agent.desired import DesiredStateStore
from agents.gpu_agent.metrics import render
from agents.gpu_agent.model import AgentInfo, GpuReading, NodeSnapshot
from agents.gpu_agent.snapshot_views import FULL, VIEWS, encode

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Published:
    """One successful collection, encoded once so each request only copies bytes."""

    snapshot: NodeSnapshot
    # Every view of ``snapshot_views.VIEWS``: a real node encodes each once per collection
    # (tens of microseconds) rather than once per request.
    views: dict[str, bytes]
    metrics_text: bytes
    monotonic_at: float

    @property
    def snapshot_json(self) -> bytes:
        return self.views[FULL]


class PodLabeller(Protocol):
    """Adds Kubernetes pods to readings (see ``kubelet.py``); a protocol so grpc stays optional."""

    def label(self, gpus: list[GpuReading]) -> None: ...


def collect_snapshot(
    backend: Backend,
    agent: AgentInfo,
    desired: DesiredStateStore,
    pods: PodLabeller | None = None,
) -> NodeSnapshot:
    """One pass: read the backend, label pods, attribute processes to the desired slices.

    Shared by the polling ``Collector`` and the simulator's on-demand ``LazyNode``
    (``lazy.py``), so both serve exactly the same snapshot.
    """
    started = time.perf_counter()
    follow = getattr(backend, "follow_slices", None)
    if follow is not None:  # the simulator runs its slices' jobs (backends/sim_jobs.py)
        follow(desired.slices)
    snapshot = backend.collect()
    if pods is not None:
        pods.label(snapshot.gpus)
    slices, generation = desired.slices, desired.generation
    if slices is not None:
        snapshot.allocations, snapshot.violations = attribute(snapshot.gpus, slices)
        snapshot.desired_generation = generation
    duration = time.perf_counter() - started
    return replace(snapshot, collect_duration_s=round(duration, 6), agent=agent)


class Collector:
    def __init__(
        self,
        backend: Backend,
        interval_s: float,
        desired: DesiredStateStore | None = None,
        pods: PodLabeller | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.backend = backend
        self.interval_s = interval_s
        # Always present, so the portal can send slices to an agent started without --state-dir.
        self.desired = desired if desired is not None else DesiredStateStore(None)
        self.pods = pods
        self._agent = AgentInfo(__version__, backend.name, interval_s)
        # Replaced wholesale, never mutated: readers need no lock to see a consistent value.
        self._published: Published | None = None
        self._attempted = threading.Event()
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="gpu-agent-collector", daemon=True)

    @property
    def published(self) -> Published | None:
        return self._published

    def known_gpu_uuids(self) -> set[str] | None:
        """This node's card and MIG UUIDs from the latest collection; None before the first."""
        published = self._published
        if published is None:
            return None
        uuids = set()
        for gpu in published.snapshot.gpus:
            if gpu.uuid:
                uuids.add(gpu.uuid)
            uuids.update(m.uuid for m in gpu.mig_devices or () if m.uuid)
        return uuids

    def last_collect_age_s(self) -> float | None:
        published = self._published
        return None if published is None else time.monotonic() - published.monotonic_at

    # What server.py reads (``ServedNode``), as the simulator's ``LazyNode`` offers it.

    def snapshot_json(self, view: str = FULL) -> bytes | None:
        published = self._published
        return None if published is None else published.views[view]

    def metrics_text(self) -> bytes | None:
        published = self._published
        return None if published is None else published.metrics_text

    def invalidate(self) -> None:
        """New slices show from the next pass, within one interval: a pass reads the
        driver, too slow to run on the thread that answers requests."""

    def gpu_count(self) -> int | None:
        published = self._published
        return None if published is None else len(published.snapshot.gpus)

    def collect_once(self) -> Published:
        snapshot = collect_snapshot(self.backend, self._agent, self.desired, self.pods)
        published = Published(
            snapshot=snapshot,
            views={view: encode(snapshot, view) for view in VIEWS},
            metrics_text=render(snapshot).encode(),
            monotonic_at=time.monotonic(),
        )
        self._published = published
        return published

    def start(self) -> None:
        self._thread.start()

    def wait_first(self, timeout: float) -> bool:
        """Block until the first collection was attempted (it may have failed)."""
        return self._attempted.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            try:
                self.collect_once()
                if self._failing:
                    log.info("collection recovered")
                self._failing = False
            except Exception:
                # Log the first failure with its traceback, then stay quiet until it recovers:
                # a dead driver would otherwise write a traceback every interval.
                if not self._failing:
                    log.exception("collection failed; serving the previous snapshot")
                else:
                    log.debug("collection still failing", exc_info=True)
                self._failing = True
            finally:
                self._attempted.set()
            # A fixed schedule keeps the period steady; after an overrun, skip rather than burst.
            next_due += self.interval_s
            now = time.monotonic()
            if next_due < now:
                next_due = now + self.interval_s
            self._stop.wait(next_due - now)
