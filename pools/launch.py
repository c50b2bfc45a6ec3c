"""How to use a vGPU: the launch settings the node agent expects, said three ways.

The environment is the agent's own definition (``agents.gpu_agent.desired.Slice``), never
a copy: what a user is told is exactly what the agent serves back for the slice and uses
to attribute the processes. A whole card carries no SM or memory limit.
"""

from __future__ import annotations

import shlex

from agents.gpu_agent.desired import Slice
from pools.choices import AllocationState
from pools.models import Allocation

# The agent's per-slice limits (HAMi-core, then MPS); a whole card is not limited.
LIMIT_VARIABLES = frozenset({
    "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
})  # fmt: skip


def launch_env(allocation: Allocation) -> dict[str, str] | None:
    """The environment a process needs to live inside the slice; None while the slice has
    no card (stranded, released)."""
    gpu = allocation.gpu
    if gpu is None:
        return None
    env = Slice(
        allocation_id=allocation.agent_id,
        gpu_uuid=gpu.uuid,
        compute_pct=allocation.compute_pct,
        memory_mib=allocation.memory_mib,
        owner=allocation.lease.unix_user,
    ).launch_env()
    if allocation.whole_card:
        env = {k: v for k, v in env.items() if k not in LIMIT_VARIABLES}
    return env


def export_block(env: dict[str, str] | None) -> str:
    """``export NAME=value`` lines for a shell, each value quoted."""
    if not env:
        return ""
    return "\n".join(f"export {name}={shlex.quote(value)}" for name, value in env.items())


def kubernetes_limits(allocation: Allocation) -> dict[str, int]:
    """HAMi's resource names for a pod asking for the same slice: memory in MiB, compute
    in percent of the card."""
    limits = {"nvidia.com/gpu": 1}
    if not allocation.whole_card:
        limits["nvidia.com/gpumem"] = allocation.memory_mib
        limits["nvidia.com/gpucores"] = allocation.compute_pct
    return limits


def kubernetes_snippet(allocation: Allocation) -> str:
    lines = ["resources:", "  limits:"]
    lines += [f"    {name}: {value}" for name, value in kubernetes_limits(allocation).items()]
    return "\n".join(lines)


def launch_settings(allocation: Allocation) -> dict | None:
    """What the launch-settings panel (``pools/_launch_settings.html``) shows of a vGPU:
    its environment, as export lines and as a pod's limits; None while it has no card or
    is no longer active."""
    env = launch_env(allocation) if allocation.state == AllocationState.ACTIVE else None
    if not env:
        return None
    return {
        "allocation": allocation, "unix_user": allocation.lease.unix_user, "env": env,
        "export_block": export_block(env), "kubernetes": kubernetes_snippet(allocation),
    }  # fmt: skip
