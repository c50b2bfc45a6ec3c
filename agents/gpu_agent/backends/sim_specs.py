"""The simulator's card models and load profiles: plain data, no state."""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property
from typing import Literal


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
    fan: bool = False  # data-centre boards are passively cooled: NVML has no fan speed

    @cached_property  # read twice per simulated reading; a frozen spec never changes it
    def reserved_mib(self) -> int:
        # What the driver keeps for itself, as nvidia-smi's "Reserved" line (about 0.6%).
        return round(self.memory_mib * 0.006)


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
        24564, 450.0, 22.0, 2520, 10501, idle_mem_clock_mhz=405, idle_temp_c=35.0, fan=True
    ),
}
# The vendors' cards for the physical model: memory as their tools report it, power caps
# as printed (hy-smi's PwrCap, cnmon's Pwr Cap, mx-smi's Pwr:Usage/Cap); idle power and
# clocks are guesses (in the simulator's 15 MHz steps), the tools not showing clocks.
VENDOR_SPECS: dict[str, GpuSpec] = {
    "Ascend 910B2C": GpuSpec(65536, 400.0, 90.0, 1800, 1600),
    "Ascend 910A": GpuSpec(32768, 310.0, 65.0, 990, 1200),
    "DCU K100_AI": GpuSpec(65520, 800.0, 118.0, 1500, 1800),
    "Arcturus GL-XL [Instinct MI100]": GpuSpec(32752, 290.0, 36.0, 1500, 1200),
    "MXC500": GpuSpec(65536, 450.0, 71.0, 1590, 1800),
    "MTT S4000": GpuSpec(49152, 450.0, 60.0, 1755, 1750),
    "MLU370-X8": GpuSpec(23374, 250.0, 106.0, 1305, 1600),
}

SPECS.update(VENDOR_SPECS)
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


ProfileKind = Literal["idle", "busy", "periodic", "ramp"]


@dataclass(frozen=True)
class LoadProfile:
    """How one simulated GPU is used; scenario files build these directly."""

    kind: ProfileKind
    target_util_pct: float
    memory_fraction: float = 0.0
    # periodic only: a job alternating compute and pauses (evaluation, checkpoints, data loading)
    period_s: float = 300.0
    duty: float = 0.7
    phase_s: float = 0.0
    # ramp only: from ramp_from_pct at Unix time ramp_start to target_util_pct over ramp_over_s
    ramp_from_pct: float = 0.0
    ramp_start: float = 0.0
    ramp_over_s: float = 60.0

    def target_at(self, t: float) -> float:
        if self.kind == "ramp":
            progress = min(max((t - self.ramp_start) / max(self.ramp_over_s, 1e-9), 0.0), 1.0)
            return self.ramp_from_pct + (self.target_util_pct - self.ramp_from_pct) * progress
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
