"""A simulated node, so the portal can be developed and demonstrated without GPUs.

Readings come from a small physical model rather than plain noise: utilization
does a mean-reverting random walk around the GPU's load profile, power follows
utilization within a second or two, temperature follows power over tens of
seconds, clocks drop when idle and energy integrates power. Everything is driven
by ``clock`` and seeded generators, so a given seed and clock sequence always
produce the same readings (and a restarted agent shows the same UUIDs).

Load profiles are plain data (:class:`LoadProfile`) and can be passed in or
swapped at run time, which is how scenario files will drive the simulator.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from agents.gpu_agent.model import GpuReading, NodeSnapshot

SIM_DRIVER_VERSION = "550.54.15"
SIM_CUDA_VERSION = "12.4"


@dataclass(frozen=True)
class GpuSpec:
    memory_mib: int
    power_limit_w: float
    idle_power_w: float
    max_sm_clock_mhz: int
    max_mem_clock_mhz: int
    idle_sm_clock_mhz: int = 210
    # HBM parts keep their memory clock up when idle; GDDR parts drop it.
    idle_mem_clock_mhz: int | None = None
    idle_temp_c: float = 32.0
    max_temp_c: float = 78.0


# Totals are what nvidia-smi reports on these cards (a little under the marketing size).
SPECS: dict[str, GpuSpec] = {
    "NVIDIA A100-SXM4-80GB": GpuSpec(81920, 400.0, 58.0, 1410, 1593),
    "NVIDIA A100-PCIE-40GB": GpuSpec(40960, 250.0, 36.0, 1410, 1215, max_temp_c=82.0),
    "NVIDIA H100 80GB HBM3": GpuSpec(81559, 700.0, 72.0, 1980, 2619),
    "NVIDIA H200": GpuSpec(143771, 700.0, 76.0, 1980, 3201),
    "NVIDIA L40S": GpuSpec(46068, 350.0, 32.0, 2520, 9001, idle_mem_clock_mhz=405),
    "NVIDIA A10": GpuSpec(23028, 150.0, 16.0, 1695, 6251, idle_mem_clock_mhz=405),
    "Tesla T4": GpuSpec(15360, 70.0, 10.0, 1590, 5001, idle_mem_clock_mhz=405, max_temp_c=72.0),
    "NVIDIA T4": GpuSpec(15360, 70.0, 10.0, 1590, 5001, idle_mem_clock_mhz=405, max_temp_c=72.0),
    "NVIDIA GeForce RTX 4090": GpuSpec(
        24564, 450.0, 22.0, 2520, 10501, idle_mem_clock_mhz=405, idle_temp_c=35.0
    ),
}
DEFAULT_SPEC = GpuSpec(24576, 300.0, 40.0, 1800, 5001, idle_mem_clock_mhz=405)


def spec_for(model: str) -> GpuSpec:
    """Look a model up by its NVML name (case-insensitive); unknown models get middling specs."""
    if model in SPECS:
        return SPECS[model]
    folded = model.casefold()
    for name, spec in SPECS.items():
        if name.casefold() == folded or name.casefold().endswith(" " + folded):
            return spec
    return DEFAULT_SPEC


ProfileKind = Literal["idle", "busy", "periodic"]


@dataclass(frozen=True)
class LoadProfile:
    """How one simulated GPU is used; scenario files will build these directly."""

    kind: ProfileKind
    target_util_pct: float
    memory_fraction: float = 0.0
    # periodic only: a job alternating compute and pauses (evaluation, checkpoints, data loading)
    period_s: float = 300.0
    duty: float = 0.7
    phase_s: float = 0.0

    def target_at(self, t: float) -> float:
        if self.kind == "periodic" and self.period_s > 0:
            position = ((t + self.phase_s) % self.period_s) / self.period_s
            return self.target_util_pct if position < self.duty else 1.0
        return self.target_util_pct

    @property
    def volatility(self) -> float:
        # Percentage points per sqrt(second): busy kernels jitter, idle cards barely move.
        return 0.6 if self.kind == "idle" else 4.0


def random_profile(rng: random.Random) -> LoadProfile:
    kind = rng.choices(("busy", "periodic", "idle"), weights=(45, 25, 30))[0]
    return _profile_of_kind(kind, rng)


def _profile_of_kind(kind: str, rng: random.Random) -> LoadProfile:
    if kind == "busy":
        return LoadProfile("busy", rng.uniform(60, 95), rng.uniform(0.35, 0.95))
    if kind == "periodic":
        period = rng.uniform(60, 600)
        return LoadProfile(
            "periodic",
            rng.uniform(70, 98),
            rng.uniform(0.3, 0.9),
            period_s=period,
            duty=rng.uniform(0.5, 0.85),
            phase_s=rng.uniform(0, period),
        )
    return LoadProfile("idle", rng.uniform(0, 2))


def default_profiles(rng: random.Random, count: int) -> list[LoadProfile]:
    profiles = [random_profile(rng) for _ in range(count)]
    # A node with no busy GPU looks broken in a demo, and one with no idle GPU leaves
    # nothing for the reclaim views to show, so force one of each where there is room.
    if count and not any(p.kind == "busy" for p in profiles):
        profiles[0] = _profile_of_kind("busy", rng)
    if count >= 2 and not any(p.kind == "idle" for p in profiles):
        profiles[-1] = _profile_of_kind("idle", rng)
    return profiles


_BUS_NUMBERS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")  # a DGX A100's layout


def _uuid_for(seed: int, hostname: str, index: int) -> str:
    h = hashlib.sha256(f"{seed}:{hostname}:{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


class _SimGpu:
    """One GPU's hidden state; ``step`` advances it by ``dt`` seconds of simulated time."""

    def __init__(
        self, index: int, model: str, seed: int, hostname: str, profile: LoadProfile, t0: float
    ) -> None:
        self.rng = random.Random(f"{seed}:{hostname}:{index}")
        self.index = index
        self.model = model
        self.spec = spec_for(model)
        self.profile = profile
        self.uuid = _uuid_for(seed, hostname, index)
        bus = _BUS_NUMBERS[index % len(_BUS_NUMBERS)]
        self.pci_bus_id = f"{index // len(_BUS_NUMBERS):08X}:{bus}:00.0"
        self.serial = str(self.rng.randrange(10**12, 10**13))
        # How hard the workload pushes power and memory bandwidth for a given utilization.
        self.intensity = self.rng.uniform(0.75, 0.97)
        self.copy_ratio = self.rng.uniform(0.15, 0.6)
        self.util = _clamp(profile.target_at(t0) + self.rng.gauss(0, 2), 0, 100)
        self.mem_used = self._memory_target()
        self.power = self._power_target()
        self.temp = self._temp_target()
        uptime_s = self.rng.uniform(86_400, 30 * 86_400)
        self.energy_mj = uptime_s * (self.spec.idle_power_w * 1.8) * 1000
        self.last_util: int | None = None

    def _memory_target(self) -> float:
        # Periodic jobs keep their memory through pauses; idle cards hold only driver context.
        if self.profile.kind == "idle":
            return 2.0
        return self.profile.memory_fraction * self.spec.memory_mib

    def _power_target(self) -> float:
        s = self.spec
        load = (self.util / 100) ** 0.9 * self.intensity
        return s.idle_power_w + (s.power_limit_w - s.idle_power_w) * load

    def _temp_target(self) -> float:
        s = self.spec
        heat = (self.power - s.idle_power_w) / (s.power_limit_w - s.idle_power_w)
        return s.idle_temp_c + (s.max_temp_c - s.idle_temp_c) * _clamp(heat, 0, 1)

    def step(self, t: float, dt: float) -> GpuReading:
        s, rng = self.spec, self.rng
        if dt > 0:
            # Ornstein-Uhlenbeck: pull toward the profile's target, noise scaled by sqrt(dt)
            # so the walk looks the same whatever the collection interval. Noise dt is capped
            # so a long pause (suspended laptop) does not produce one wild jump.
            walk_dt = min(dt, 10.0)
            target = self.profile.target_at(t)
            self.util += (target - self.util) * (1 - math.exp(-0.4 * dt))
            self.util += rng.gauss(0, self.profile.volatility * math.sqrt(walk_dt))
            self.util = _clamp(self.util, 0, 100)
            mem_target = self._memory_target()
            # Jobs allocate over tens of seconds but free everything at once when they exit.
            mem_tau = 30.0 if mem_target >= self.mem_used else 2.0
            self.mem_used += (mem_target - self.mem_used) * (1 - math.exp(-dt / mem_tau))
            if self.profile.kind != "idle":
                self.mem_used += rng.gauss(0, 0.002 * s.memory_mib * math.sqrt(walk_dt))
            self.mem_used = _clamp(self.mem_used, 0, s.memory_mib)
            previous_power = self.power
            self.power += (self._power_target() - self.power) * (1 - math.exp(-dt / 1.5))
            self.power += rng.gauss(0, 0.01 * s.power_limit_w * math.sqrt(walk_dt))
            self.power = _clamp(self.power, s.idle_power_w * 0.85, s.power_limit_w * 1.02)
            self.energy_mj += (previous_power + self.power) / 2 * dt * 1000
            self.temp += (self._temp_target() - self.temp) * (1 - math.exp(-dt / 20))
        return self._reading(dt)

    def _reading(self, dt: float) -> GpuReading:
        s, rng = self.spec, self.rng
        util = round(self.util)
        # Real busy GPUs almost never report the same percentage twice running; keep
        # that property so dashboards visibly tick.
        if dt > 0 and util == self.last_util and self.profile.kind != "idle":
            util = int(_clamp(util + rng.choice((-1, 1)), 0, 100))
        self.last_util = util
        busy = util >= 3
        sm_clock = s.idle_sm_clock_mhz
        if busy:
            headroom = 0.9 if self.power > 0.97 * s.power_limit_w else 1.0
            sm_clock = s.max_sm_clock_mhz * headroom * rng.uniform(0.94, 1.0)
            sm_clock = max(s.idle_sm_clock_mhz, 15 * round(sm_clock / 15))  # 15 MHz steps
        mem_clock = s.max_mem_clock_mhz
        if not busy and s.idle_mem_clock_mhz is not None:
            mem_clock = s.idle_mem_clock_mhz
        used = round(self.mem_used)
        return GpuReading(
            index=self.index,
            uuid=self.uuid,
            name=self.model,
            pci_bus_id=self.pci_bus_id,
            serial=self.serial,
            memory_total_mib=s.memory_mib,
            memory_used_mib=used,
            memory_free_mib=s.memory_mib - used,
            utilization_gpu_pct=util,
            utilization_memory_pct=round(_clamp(util * self.copy_ratio, 0, 100)),
            temperature_c=round(self.temp),
            power_w=round(self.power, 3),
            power_limit_w=s.power_limit_w,
            sm_clock_mhz=int(sm_clock),
            mem_clock_mhz=mem_clock,
            energy_mj=int(self.energy_mj),
        )


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
    ) -> None:
        if gpu_count < 0:
            raise ValueError("gpu_count must not be negative")
        if profiles is not None and len(profiles) != gpu_count:
            raise ValueError(f"expected {gpu_count} load profiles, got {len(profiles)}")
        self.hostname = hostname
        self._clock = clock
        self._last_t = clock()
        if profiles is None:
            profiles = default_profiles(random.Random(f"{seed}:{hostname}"), gpu_count)
        self._gpus = [
            _SimGpu(i, model, seed, hostname, profile, self._last_t)
            for i, profile in enumerate(profiles)
        ]

    @property
    def profiles(self) -> list[LoadProfile]:
        return [gpu.profile for gpu in self._gpus]

    def set_profile(self, index: int, profile: LoadProfile) -> None:
        """Change a GPU's workload; the readings drift to it as a real card would."""
        self._gpus[index].profile = profile

    def collect(self) -> NodeSnapshot:
        now = self._clock()
        dt = max(0.0, now - self._last_t)
        self._last_t = now
        return NodeSnapshot(
            hostname=self.hostname,
            collected_at=now,
            gpus=[gpu.step(now, dt) for gpu in self._gpus],
            driver_version=SIM_DRIVER_VERSION,
            cuda_version=SIM_CUDA_VERSION,
        )

    def close(self) -> None:
        """Nothing to release; present to satisfy the Backend contract."""
