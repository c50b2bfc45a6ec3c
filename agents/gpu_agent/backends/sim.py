"""A simulated node, so the portal can be developed and demonstrated without GPUs.

Readings come from a small physical model rather than plain noise (see
``sim_gpu``). Everything is driven by ``clock`` and seeded generators, so a given
seed and clock sequence always produce the same readings (and a restarted agent
shows the same UUIDs). A scenario file (``scenario``) scripts what happens to the
cards; without one, each card gets a random load profile. Once the portal sends the
node its slices, the cards run what their owners run in them (``sim_jobs``).
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence

from agents.gpu_agent.backends.scenario import Scenario, ScenarioRunner
from agents.gpu_agent.backends.sim_gpu import SimGpu
from agents.gpu_agent.backends.sim_jobs import Job, jobs_for
from agents.gpu_agent.backends.sim_specs import (
    DEFAULT_SPEC,
    SPECS,
    GpuSpec,
    LoadProfile,
    default_profiles,
    random_profile,
    spec_for,
)
from agents.gpu_agent.backends.sim_vendor import VENDORS, impersonate, vendor_uuid
from agents.gpu_agent.backends.xid import XidTally
from agents.gpu_agent.desired import Slice
from agents.gpu_agent.model import NodeSnapshot

SIM_DRIVER_VERSION = "550.54.15"
SIM_CUDA_VERSION = "12.4"

__all__ = [
    "DEFAULT_SPEC",
    "SPECS",
    "GpuSpec",
    "LoadProfile",
    "SimulatedBackend",
    "random_profile",
    "spec_for",
]


class SimulatedBackend:
    name = "sim"

    def __init__(
        self,
        hostname: str,
        gpu_count: int,
        model: str,
        seed: int,
        clock: Callable[[], float] = time.time,
        profiles: Sequence[LoadProfile] | None = None,
        scenario: Scenario | None = None,
        idle_owners: Collection[str] = (),
        vendor: str | None = None,
    ) -> None:
        if gpu_count < 0:
            raise ValueError("gpu_count must not be negative")
        if profiles is not None and len(profiles) != gpu_count:
            raise ValueError(f"expected {gpu_count} load profiles, got {len(profiles)}")
        self.hostname = hostname
        self._seed = seed
        self._idle_owners = frozenset(idle_owners)
        self._followed: Sequence[Slice] | None = None
        self._clock = clock
        self._last_t = clock()
        if profiles is None:
            if scenario is not None:
                # A scripted node starts idle; the script says what runs.
                profiles = [LoadProfile("idle", 0.5)] * gpu_count
            else:
                profiles = default_profiles(random.Random(f"{seed}:{hostname}"), gpu_count)
        self._xids = XidTally()
        self._gpus = [
            SimGpu(i, model, seed, hostname, profile, self._last_t, self._xids, scenario is None)
            for i, profile in enumerate(profiles)
        ]
        # Another vendor's cards (sim_vendor): the same model, reported as that vendor's tool.
        if vendor is not None and vendor not in VENDORS:
            raise ValueError(f"unknown vendor {vendor!r}: one of {', '.join(VENDORS)}")
        self.vendor = vendor
        if vendor is not None:
            for gpu in self._gpus:
                gpu.uuid = vendor_uuid(vendor, gpu.uuid)
        self._runner = ScenarioRunner(scenario, self._last_t) if scenario else None
        if self._runner is not None:
            self._runner.advance(self._last_t, self._gpus)  # the events at 0 s

    @property
    def gpu_count(self) -> int:
        """Known without collecting, so the fleet can announce a node before its first request."""
        return len(self._gpus)

    @property
    def profiles(self) -> list[LoadProfile]:
        return [gpu.profile for gpu in self._gpus]

    def set_profile(self, index: int, profile: LoadProfile) -> None:
        """Change a GPU's workload; the readings drift to it as a real card would."""
        self._gpus[index].profile = profile

    def follow_slices(self, slices: Sequence[Slice] | None) -> None:
        """The slices the portal placed here (the agent's desired state, before each
        collection): from the first list on, the cards run their owners' jobs and nothing
        else. A scripted node runs its script whatever it holds."""
        if slices is None or slices is self._followed or self._runner is not None:
            return
        self._followed = slices
        by_card: dict[str, list[Job]] = defaultdict(list)
        for job in jobs_for(slices, self._seed, self._idle_owners):
            by_card[job.gpu_uuid].append(job)
        for gpu in self._gpus:
            gpu.run_jobs(by_card.get(gpu.uuid, []))

    def collect(self) -> NodeSnapshot:
        now = self._clock()
        dt = max(0.0, now - self._last_t)
        self._last_t = now
        if self._runner is not None:
            self._runner.advance(now, self._gpus)
        gpus = [gpu.step(now, dt) for gpu in self._gpus]
        if self.vendor is not None:
            return NodeSnapshot(
                hostname=self.hostname,
                collected_at=now,
                gpus=[impersonate(g, self.vendor) for g in gpus],
                driver_version=VENDORS[self.vendor].driver_version,
            )
        return NodeSnapshot(
            hostname=self.hostname,
            collected_at=now,
            gpus=gpus,
            driver_version=SIM_DRIVER_VERSION,
            cuda_version=SIM_CUDA_VERSION,
        )

    def close(self) -> None:
        """Nothing to release; present to satisfy the Backend contract."""
