"""The memory limit a GPU process was started under, read from its environment.

Four ways hold a process to its slice's memory, each set by the slice's launch settings
(``desired.Slice.launch_env``): the NVIDIA driver's own cap (``NVIDIA_GPU_MEMORY_LIMIT``,
MiB, enforced by driver r615 and later), HAMi-core (``CUDA_DEVICE_MEMORY_LIMIT``, e.g.
``8192m``), an MPS server (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ``0=8192M``), or MIG
(a device of its own, no variable). A variable holds only where its mechanism runs: the
driver's from r615, HAMi-core's with ``libvgpu.so`` preloaded (``LD_PRELOAD`` or the
process's ``/etc/ld.so.preload``), MPS's for a client of an MPS server (its pipe
directory set or at its default place); of the limits that hold, the lowest does. The first
of a name's duplicates counts, as ``getenv`` reads it; a value that is not a plain size
declares nothing. Pure: plain values in, a pair out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

DRIVER = "NVIDIA_GPU_MEMORY_LIMIT"
HAMI = "CUDA_DEVICE_MEMORY_LIMIT"
HAMI_DEVICE0 = "CUDA_DEVICE_MEMORY_LIMIT_0"  # HAMi-core's per-device form
MPS = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
PRELOAD = "LD_PRELOAD"
MPS_PIPE = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE = "tmp/nvidia-mps"  # under the process's root
HAMI_LIBRARY = "libvgpu.so"
DRIVER_MIN_MAJOR = 615
# The names whose values the agent reads from a process's environment (besides the
# allocation variable); nothing else of the environment is kept.
NAMES = (DRIVER, HAMI, HAMI_DEVICE0, MPS, PRELOAD, MPS_PIPE)
_SIZE = re.compile(r"^\s*([0-9]{1,12})\s*([kKmMgG]?)[bB]?\s*$")
_TO_MIB = {"": 1 / (1024 * 1024), "k": 1 / 1024, "m": 1, "g": 1024}
_MAX_MIB = 1 << 30


def _mib(text: str, bare: str) -> int | None:
    """A size in MiB; ``bare`` is the unit of a number without one (bytes for HAMi-core)."""
    match = _SIZE.match(text)
    if not match:
        return None
    mib = int(int(match[1]) * _TO_MIB[(match[2] or bare).lower()])
    return mib if 0 < mib <= _MAX_MIB else None


def _mps_device0(text: str) -> int | None:
    # "0=8192M,1=4096M": the limit of device 0, the slice's card inside the process.
    for part in text.split(","):
        device, sep, size = part.partition("=")
        if sep and device.strip() == "0":
            return _mib(size, "m")
    return None


def driver_enforces(version: str | None) -> bool:
    """Whether a driver of this version ('615.12.01') holds NVIDIA_GPU_MEMORY_LIMIT."""
    major = (version or "").split(".", 1)[0]
    return major.isdigit() and int(major) >= DRIVER_MIN_MAJOR


def hami_preloaded(env: Mapping[str, str], preload_file: str = "") -> bool:
    return HAMI_LIBRARY in env.get(PRELOAD, "") or HAMI_LIBRARY in preload_file


def mps_client(env: Mapping[str, str], default_pipe: bool = False) -> bool:
    """An MPS server's client: its pipe directory set, or one at the default place."""
    return bool(env.get(MPS_PIPE)) or default_pipe


def declared(
    env: Mapping[str, str],
    *,
    driver: bool = True,
    hami: bool | None = None,
    mps: bool | None = None,
) -> tuple[str, int] | None:
    """``(how, MiB)`` of the lowest memory limit that holds for a process of this
    environment ("driver", "hami" or "mps"), None when none does. ``driver``: the node's
    driver enforces its cap; ``hami`` and ``mps`` (None: judged from the environment
    alone) whether libvgpu is preloaded and an MPS server serves the process."""
    hami = hami_preloaded(env) if hami is None else hami
    mps = mps_client(env) if mps is None else mps
    found = []
    if driver and DRIVER in env and (mib := _mib(env[DRIVER], "m")) is not None:
        found.append((mib, "driver"))
    for name in (HAMI_DEVICE0, HAMI):
        if hami and name in env and (mib := _mib(env[name], "")) is not None:
            found.append((mib, "hami"))
    if mps and MPS in env and (mib := _mps_device0(env[MPS])) is not None:
        found.append((mib, "mps"))
    if not found:
        return None
    mib, how = min(found)
    return how, mib
