"""One simulated card's hidden state and physics.

Utilization does a mean-reverting random walk around the load profile, power
follows utilization within a second or two, temperature follows power over tens
of seconds, clocks drop when idle and energy integrates power. Scenario events
flip the rest: overheating, ECC errors, XIDs, the card falling off the bus, and
the processes that come and go with their owners and environments.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass, field

from agents.gpu_agent import limits
from agents.gpu_agent.backends.sim_jobs import Job, JobsLoad
from agents.gpu_agent.backends.sim_specs import LoadProfile, spec_for
from agents.gpu_agent.backends.xid import XidTally
from agents.gpu_agent.model import GpuReading, ProcessReading

_BUS_NUMBERS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")  # a DGX A100's layout
_USERS = ("alice", "bob", "carol", "dave", "erin")
# What the CUDA context and driver keep on a card with no job: nvidia-smi's idle reading.
_CONTEXT_MIB = 2.0
# How far past its usual peak a card runs when its cooling fails (a blocked fan, a hot aisle).
_OVERHEAT_EXTRA_C = 16.0
# What slices' jobs may hold of a card together: oversubscribed memory is asked, not used.
_JOBS_MEMORY_SHARE = 0.9


@dataclass
class SimProcess:
    pid: int
    user: str
    command: str
    memory_mib: int
    uid: int = 1000
    env: dict[str, str] = field(default_factory=dict)


def _uuid_for(seed: int, hostname: str, index: int) -> str:
    h = hashlib.sha256(f"{seed}:{hostname}:{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


class SimGpu:
    """One GPU; ``step`` advances it by ``dt`` seconds of simulated time."""

    def __init__(
        self,
        index: int,
        model: str,
        seed: int,
        hostname: str,
        profile: LoadProfile,
        t0: float,
        xids: XidTally,
        auto_processes: bool = True,
    ) -> None:
        self.rng = random.Random(f"{seed}:{hostname}:{index}")  # noqa: S311 (simulated data)
        self.index = index
        self.model = model
        self.spec = spec_for(model)
        self.profile: LoadProfile | JobsLoad = profile
        self.uuid = _uuid_for(seed, hostname, index)
        bus = _BUS_NUMBERS[index % len(_BUS_NUMBERS)]
        self.pci_bus_id = f"{index // len(_BUS_NUMBERS):08X}:{bus}:00.0"
        self.serial = str(self.rng.randrange(10**12, 10**13))
        # How hard the workload pushes power, memory bandwidth and tensor cores.
        self.intensity = self.rng.uniform(0.75, 0.97)
        self.copy_ratio = self.rng.uniform(0.15, 0.6)
        self.tensor_share = self.rng.uniform(0.2, 0.7)
        self.util = _clamp(profile.target_at(t0) + self.rng.gauss(0, 2), 0, 100)
        self.overheat = False
        self.lost = False
        self.ecc_corrected = 0
        self.ecc_uncorrected = 0
        self.remapped_correctable = 0
        self.remapped_uncorrectable = 0
        self.row_remap_failure = False
        self.pcie_replays = 0
        self.xids = xids
        self.processes: dict[int, SimProcess] = {}
        # Without a scenario, a loaded card shows one job of a made-up user.
        self.auto_processes = auto_processes
        self._auto_user = self.rng.choice(_USERS)
        self.mem_used = self._memory_target()
        self.power = self._power_target()
        self.temp = self._temp_target()
        uptime_s = self.rng.uniform(86_400, 30 * 86_400)
        self.energy_mj = uptime_s * (self.spec.idle_power_w * 1.8) * 1000
        self.last_util: int | None = None

    def run_jobs(self, jobs: list[Job]) -> None:
        """Run exactly these slice jobs (``sim_jobs``) from now on: their processes, their
        load added up, and no made-up user's job; an idle card when there are none."""
        self.auto_processes = False
        cap = self.spec.memory_mib * _JOBS_MEMORY_SHARE - _CONTEXT_MIB
        total = sum(job.memory_mib for job in jobs)
        scale = min(1.0, cap / total) if total else 1.0
        self.processes = {}
        for job in jobs:
            pid = job.pid
            while pid in self.processes:  # two jobs drew the same pid
                pid += 1
            self.processes[pid] = SimProcess(
                pid=pid, user=job.owner, command=job.command,
                memory_mib=int(job.memory_mib * scale), env=job.env,
            )  # fmt: skip
        idle = LoadProfile("idle", 0.5)
        self.profile = JobsLoad(tuple(job.load for job in jobs)) if jobs else idle
        # Processes that ended freed their memory at once.
        self.mem_used = min(self.mem_used, self._memory_target())

    def _memory_target(self) -> float:
        if self.processes:
            return _CONTEXT_MIB + sum(p.memory_mib for p in self.processes.values())
        # Periodic jobs keep their memory through pauses; idle cards hold only driver context.
        if self.profile.kind == "idle":
            return _CONTEXT_MIB
        return self.profile.memory_fraction * self.spec.memory_mib

    def _power_target(self) -> float:
        s = self.spec
        load = (self.util / 100) ** 0.9 * self.intensity
        return s.idle_power_w + (s.power_limit_w - s.idle_power_w) * load

    def _temp_target(self) -> float:
        s = self.spec
        heat = (self.power - s.idle_power_w) / (s.power_limit_w - s.idle_power_w)
        if self.overheat:
            # Cooling has failed: the card heads past its slowdown point whatever the load.
            return s.max_temp_c + _OVERHEAT_EXTRA_C
        return s.idle_temp_c + (s.max_temp_c - s.idle_temp_c) * _clamp(heat, 0, 1)

    def step(self, t: float, dt: float) -> GpuReading:
        if dt > 0:
            self._advance(t, dt)
        if self.lost:
            # A card off the bus answers nothing but what the driver remembers of it.
            return GpuReading(
                index=self.index,
                uuid=self.uuid,
                name=self.model,
                pci_bus_id=self.pci_bus_id,
                serial=self.serial,
                health="lost",
            )
        return self._reading(dt)

    def _advance(self, t: float, dt: float) -> None:
        # The simulator's hot loop (a fresh snapshot of 1,000 nodes x 8 cards every few
        # seconds): state in locals, _clamp's min(max()) written out, the noise scale
        # computed once. The arithmetic and the draws from rng are those of the plain
        # version, in the same order, so a seed and a clock give the same readings to the
        # last bit.
        s, rng, profile = self.spec, self.rng, self.profile
        gauss, exp = rng.gauss, math.exp
        # Ornstein-Uhlenbeck: pull toward the profile's target, noise scaled by sqrt(dt)
        # so the walk looks the same whatever the collection interval. Noise dt is capped
        # so a long pause (suspended laptop) does not produce one wild jump.
        noise = math.sqrt(min(dt, 10.0))
        util = self.util
        util += (profile.target_at(t) - util) * (1 - exp(-0.4 * dt))
        util += gauss(0, profile.volatility * noise)
        if util < 0:
            util = 0
        if util > 100:
            util = 100
        self.util = util
        mem_target = self._memory_target()
        mem_used = self.mem_used
        # Jobs allocate over tens of seconds but free everything at once when they exit.
        mem_tau = 30.0 if mem_target >= mem_used else 2.0
        if self.processes:
            mem_tau = 2.0  # a scripted process states its memory; follow it closely
        mem_used += (mem_target - mem_used) * (1 - exp(-dt / mem_tau))
        if profile.kind != "idle" and not self.processes:
            mem_used += gauss(0, 0.002 * s.memory_mib * noise)
        if mem_used < 0:
            mem_used = 0
        if mem_used > s.memory_mib:
            mem_used = s.memory_mib
        self.mem_used = mem_used
        previous_power = power = self.power
        power += (self._power_target() - power) * (1 - exp(-dt / 1.5))
        power += gauss(0, 0.01 * s.power_limit_w * noise)
        low, high = s.idle_power_w * 0.85, s.power_limit_w * 1.02
        if power < low:
            power = low
        if power > high:
            power = high
        self.power = power
        self.energy_mj += (previous_power + power) / 2 * dt * 1000
        self.temp += (self._temp_target() - self.temp) * (1 - exp(-dt / 20))

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
            if self.overheat:
                headroom = 0.6  # thermal slowdown
            sm_clock = s.max_sm_clock_mhz * headroom * rng.uniform(0.94, 1.0)
            sm_clock = max(s.idle_sm_clock_mhz, 15 * round(sm_clock / 15))  # 15 MHz steps
        mem_clock = s.max_mem_clock_mhz
        hbm = s.idle_mem_clock_mhz is None
        if not busy and not hbm:
            mem_clock = s.idle_mem_clock_mhz
        used = round(self.mem_used)
        mem_util = round(_clamp(util * self.copy_ratio, 0, 100))
        # Host traffic: input batches in, a little back out; a quiet bus still carries polls.
        rx = int((util / 100) * 2.0e9 * self.intensity * rng.uniform(0.8, 1.2)) + 40_960
        tx = int(rx * rng.uniform(0.05, 0.2)) + 20_480
        return GpuReading(
            index=self.index,
            uuid=self.uuid,
            name=self.model,
            pci_bus_id=self.pci_bus_id,
            serial=self.serial,
            memory_total_mib=s.memory_mib,
            memory_used_mib=used,
            memory_free_mib=s.memory_mib - used - s.reserved_mib,
            utilization_gpu_pct=util,
            utilization_memory_pct=mem_util,
            temperature_c=round(self.temp),
            power_w=round(self.power, 3),
            power_limit_w=s.power_limit_w,
            sm_clock_mhz=int(sm_clock),
            mem_clock_mhz=mem_clock,
            energy_mj=int(self.energy_mj),
            memory_reserved_mib=s.reserved_mib,
            # Only HBM parts have a memory temperature sensor NVML can read.
            memory_temperature_c=round(self.temp + 4) if hbm else None,
            fan_speed_pct=round(_clamp(30 + (self.temp - 30) * 1.2, 30, 100)) if s.fan else None,
            encoder_utilization_pct=0,
            decoder_utilization_pct=0,
            pcie_tx_bytes_per_s=tx,
            pcie_rx_bytes_per_s=rx,
            pcie_replay_total=self.pcie_replays,
            gr_engine_active_ratio=round(util / 100 * 0.97, 4),
            tensor_active_ratio=round(util / 100 * self.tensor_share, 4),
            dram_active_ratio=round(mem_util / 100, 4),
            ecc_corrected_total=self.ecc_corrected,
            ecc_uncorrected_total=self.ecc_uncorrected,
            remapped_rows_correctable=self.remapped_correctable if hbm else None,
            remapped_rows_uncorrectable=self.remapped_uncorrectable if hbm else None,
            row_remap_failure=self.row_remap_failure if hbm else None,
            xid_last=self.xids.last(self.index),
            xid_errors=self.xids.counts(self.index),
            mig_mode="disabled",
            processes=self._process_readings(used),
        )

    def _process_readings(self, used_mib: int) -> list[ProcessReading]:
        if self.processes:
            return [
                ProcessReading(
                    pid=p.pid,
                    memory_used_mib=p.memory_mib,
                    user=p.user,
                    uid=p.uid,
                    command=p.command,
                    allocation_env=p.env.get("GPU_PORTAL_ALLOCATION"),
                    # The simulated driver is r550: only HAMi-core or MPS can hold it.
                    memory_limit=limits.declared(p.env, driver=False) or "none",
                )
                for p in self.processes.values()
            ]
        if not self.auto_processes or self.profile.kind == "idle" or used_mib <= _CONTEXT_MIB:
            return []
        return [
            ProcessReading(
                pid=20_000 + self.index,
                memory_used_mib=used_mib - int(_CONTEXT_MIB),
                user=self._auto_user,
                uid=1000 + _USERS.index(self._auto_user),
                command="python train.py",
            )
        ]
