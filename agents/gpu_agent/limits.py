"""The memory limit a GPU process was started under, read from its environment.

Four ways hold a process to its slice's memory, each set by the slice's launch settings
(``desired.Slice.launch_env``): the NVIDIA driver's own cap (``NVIDIA_GPU_MEMORY_LIMIT``,
MiB, enforced by driver r615 and later), HAMi-core (``CUDA_DEVICE_MEMORY_LIMIT``, e.g.
``8192m``), an MPS server (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ``0=8192M``), or MIG
(a device of its own, no variable). The lowest limit declared is the one that holds; a
value that is not a plain size declares nothing. Pure: a mapping in, a pair out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

DRIVER = "NVIDIA_GPU_MEMORY_LIMIT"
HAMI = "CUDA_DEVICE_MEMORY_LIMIT"
MPS = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
# The names whose values the agent reads from a process's environment (besides the
# allocation variable); nothing else of the environment is kept.
NAMES = (DRIVER, HAMI, MPS)
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


def declared(env: Mapping[str, str]) -> tuple[str, int] | None:
    """``(how, MiB)`` of the lowest memory limit the environment declares ("driver",
    "hami" or "mps"), None when it declares none."""
    found = []
    if DRIVER in env and (mib := _mib(env[DRIVER], "m")) is not None:
        found.append((mib, "driver"))
    if HAMI in env and (mib := _mib(env[HAMI], "")) is not None:
        found.append((mib, "hami"))
    if MPS in env and (mib := _mps_device0(env[MPS])) is not None:
        found.append((mib, "mps"))
    if not found:
        return None
    mib, how = min(found)
    return how, mib
