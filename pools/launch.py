"""How to use a vGPU: the launch settings the node agent expects, said three ways.

The environment is the agent's own definition (``agents.gpu_agent.desired.Slice``), never
a copy: what a user is told is exactly what the agent serves back for the slice and uses
to attribute the processes. A whole card carries no SM or memory limit.
"""

from __future__ import annotations

import shlex

from agents.choices import GpuVendor
from agents.gpu_agent.desired import ALLOCATION_ENV_VAR, Slice
from pools import slicing
from pools.choices import AllocationState
from pools.models import Allocation

# The agent's per-slice limits (the driver's, HAMi-core's, then MPS's); a whole card is
# not limited.
LIMIT_VARIABLES = frozenset({
    "NVIDIA_GPU_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
})  # fmt: skip


# Other vendors' runtimes choose their card by index; their slices' limits are HAMi's in
# Kubernetes (pools.slicing): on a node only the card and the allocation are set.
VISIBLE_DEVICES = {
    GpuVendor.ASCEND: "ASCEND_RT_VISIBLE_DEVICES",
    GpuVendor.HYGON: "HIP_VISIBLE_DEVICES",
    GpuVendor.AMD: "HIP_VISIBLE_DEVICES",
    GpuVendor.CAMBRICON: "MLU_VISIBLE_DEVICES",
    GpuVendor.MOORETHREADS: "MUSA_VISIBLE_DEVICES",
}


def launch_env(allocation: Allocation) -> dict[str, str] | None:
    """The environment a process needs to live inside the slice; None while the slice has
    no card (stranded, released)."""
    gpu = allocation.gpu
    if gpu is None:
        return None
    if gpu.vendor != GpuVendor.NVIDIA:
        env = {VISIBLE_DEVICES[gpu.vendor]: str(gpu.index)} if gpu.vendor in VISIBLE_DEVICES else {}
        env[ALLOCATION_ENV_VAR] = allocation.agent_id
        return env
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
    """HAMi's resource names for a pod asking for the same slice, in the card's vendor's
    names (pools.slicing): memory in the vendor's unit (MiB for NVIDIA), compute in
    percent of the card where the vendor takes it; one whole card where HAMi slices none."""
    gpu = allocation.gpu
    names = slicing.resources(gpu.vendor, gpu.model) if gpu else slicing.resources("nvidia", "")
    return names.limits(
        memory_mib=allocation.memory_mib, compute_pct=allocation.compute_pct,
        whole=allocation.whole_card,
    )  # fmt: skip


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
        "nvidia": allocation.gpu.vendor == GpuVendor.NVIDIA,
    }  # fmt: skip
