"""What the owners of a simulated node's slices run in them.

Once the portal has sent a simulated node its desired state, the node is one the portal
manages: its made-up users stop, and each slice's owner runs one job in it, started with
the slice's launch settings (``GPU_PORTAL_ALLOCATION`` and the memory limits), so the agent
attributes the job to its allocation, and sees it held to its slice, as it would a real
one. An owner named idle (``--idle-owner``) holds slices and runs nothing in them: the idle
allocations the portal's reports find.

A job's rhythm and size come from a generator seeded by the node's seed and the
allocation id, so a restarted simulator, and the portal's demo history
(``agents/gpu_agent/replay.py``), run the same job in the same slice.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from agents.gpu_agent.backends.procinfo import ALLOCATION_ENV_VAR
from agents.gpu_agent.backends.sim_specs import LoadProfile
from agents.gpu_agent.desired import Slice
from agents.gpu_agent.limits import HAMI_LIBRARY, PRELOAD

_COMMANDS = (
    "python train.py",
    "torchrun --nproc-per-node 1 train.py",
    "python -m vllm.entrypoints.openai.api_server",
    "python evaluate.py",
)
FIRST_PID = 30_000
SIM_HAMI_LIBRARY = f"/usr/local/vgpu/{HAMI_LIBRARY}"


@dataclass(frozen=True)
class Job:
    allocation_id: str
    gpu_uuid: str
    owner: str
    pid: int
    command: str
    memory_mib: int
    load: LoadProfile  # in percent of the whole card: the slice's share at most
    slice_: Slice | None = None

    @property
    def env(self) -> dict[str, str]:
        """What the owner started it with: the slice's launch settings, limits and all, on a
        node set up with HAMi-core (its library preloaded, as HAMi's containers have it)."""
        if self.slice_ is None:
            return {ALLOCATION_ENV_VAR: self.allocation_id}
        return {**self.slice_.launch_env(), PRELOAD: SIM_HAMI_LIBRARY}


@dataclass(frozen=True)
class JobsLoad:
    """A card's load while jobs run on it: theirs added up (a card saturates at 100 %).
    Read by ``SimGpu`` as it reads a ``LoadProfile``."""

    jobs: tuple[LoadProfile, ...]
    kind: str = "busy"
    memory_fraction: float = 0.0  # the jobs' processes state their memory

    def target_at(self, t: float) -> float:
        return min(100.0, sum(job.target_at(t) for job in self.jobs))

    @property
    def volatility(self) -> float:
        return 4.0


def job_for(slice_: Slice, seed: int) -> Job:
    """The job the slice's owner runs in it (the same for a seed and allocation)."""
    rng = random.Random(f"{seed}:job:{slice_.allocation_id}")  # noqa: S311 (simulated data)
    share = slice_.compute_pct
    util = share * rng.uniform(0.6, 0.95)
    if rng.random() < 0.6:
        load = LoadProfile("busy", util)
    else:
        period = rng.uniform(120, 900)
        load = LoadProfile("periodic", util, period_s=period, duty=rng.uniform(0.5, 0.85),
                           phase_s=rng.uniform(0, period))  # fmt: skip
    return Job(
        allocation_id=slice_.allocation_id,
        gpu_uuid=slice_.gpu_uuid,
        owner=slice_.owner,
        pid=FIRST_PID + rng.randrange(30_000),
        command=rng.choice(_COMMANDS),
        memory_mib=int(slice_.memory_mib * rng.uniform(0.45, 0.85)),
        load=load,
        slice_=slice_,
    )


def jobs_for(slices: Iterable[Slice], seed: int, idle_owners: Collection[str] = ()) -> list[Job]:
    """One job per slice, but none in the slices of idle owners."""
    return [job_for(s, seed) for s in slices if s.owner not in idle_owners]
