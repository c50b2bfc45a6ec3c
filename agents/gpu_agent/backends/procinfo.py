"""Who runs a GPU process and which allocation it claims, read from /proc.

NVML only gives PIDs and memory. The owner, command line, the allocation variable and
the memory limit the process was started under (gpu_agent/limits.py) come from
``/proc/<pid>``, read once when a PID first shows up on a card
and kept until it disappears: a busy node has hundreds of processes and the agent
collects every second, so re-reading them each time would dominate its cost.

The agent must see the host's PID namespace (``hostPID: true`` in Kubernetes)
and run as root to read other users' environments; without that the owner and
command are still read and only the allocation variable is missing.
"""

from __future__ import annotations

import logging
import os
import pwd
from dataclasses import dataclass
from pathlib import Path

from agents.gpu_agent import limits

log = logging.getLogger(__name__)

# The variable the portal hands to users with each slice's launch settings.
ALLOCATION_ENV_VAR = "GPU_PORTAL_ALLOCATION"
COMMAND_MAX_CHARS = 512


@dataclass(frozen=True)
class ProcessInfo:
    uid: int | None
    user: str | None
    command: str | None
    allocation_env: str | None
    # (how, MiB) of the memory limit that holds it (limits.declared: a variable whose
    # mechanism runs); "none" when none does; None when the environment could not be read.
    memory_limit: tuple[str, int] | str | None = None


class ProcessInspector:
    def __init__(self, proc_root: Path = Path("/proc"), env_var: str = ALLOCATION_ENV_VAR) -> None:
        self._root = proc_root
        self._env_var = env_var
        self._needle = env_var.encode() + b"="
        self._wanted = tuple(name.encode() + b"=" for name in limits.NAMES)
        self._cache: dict[int, ProcessInfo] = {}
        # Whether this node's driver holds NVIDIA_GPU_MEMORY_LIMIT (r615 and later): set
        # by the backend once it knows the driver's version.
        self.driver_caps = False
        self._users: dict[int, str | None] = {}
        self.reads = 0  # how many PIDs were read from /proc; the tests and the benchmark check it

    def info(self, pid: int) -> ProcessInfo:
        cached = self._cache.get(pid)
        if cached is None:
            cached = self._cache[pid] = self._read(pid)
        return cached

    def retain(self, live_pids: set[int]) -> None:
        """Forget PIDs that left every card, so a reused PID is read afresh."""
        for pid in self._cache.keys() - live_pids:
            del self._cache[pid]

    def _read(self, pid: int) -> ProcessInfo:
        self.reads += 1
        base = self._root / str(pid)
        try:
            uid: int | None = base.stat().st_uid
        except OSError:
            # Gone already, or in a PID namespace we cannot see.
            return ProcessInfo(None, None, None, None)
        env = self._environ(base)
        allocation = memory_limit = None
        if env is not None:
            allocation = env.pop(self._env_var, "").strip() or None
            hami = limits.hami_preloaded(env, self._root_file(base, "etc/ld.so.preload"))
            mps = limits.mps_client(env, (base / "root" / limits.MPS_DEFAULT_PIPE).exists())
            memory_limit = limits.declared(env, driver=self.driver_caps, hami=hami, mps=mps)
            memory_limit = memory_limit or "none"
        return ProcessInfo(
            uid=uid,
            user=self._user(uid) if uid is not None else None,
            command=self._command(base),
            allocation_env=allocation,
            memory_limit=memory_limit,
        )

    def _user(self, uid: int) -> str | None:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                # A container's user unknown to the host: the number is still useful.
                self._users[uid] = None
        return self._users[uid]

    @staticmethod
    def _command(base: Path) -> str | None:
        try:
            raw = (base / "cmdline").read_bytes()
        except OSError:
            return None
        text = raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        return text[:COMMAND_MAX_CHARS] or None

    def _environ(self, base: Path) -> dict[str, str] | None:
        """The allocation variable and the memory-limit variables of the environment, None
        when it cannot be read; nothing else of it is kept (it holds the user's secrets)."""
        try:
            environ = (base / "environ").read_bytes()
        except OSError as exc:
            log.debug("cannot read %s/environ: %s", base, exc)
            return None
        found: dict[str, str] = {}
        for entry in environ.split(b"\0"):
            if entry.startswith(self._needle) or entry.startswith(self._wanted):
                name, _sep, value = entry.partition(b"=")
                # The first of duplicates, as getenv() reads it.
                found.setdefault(name.decode("ascii", "replace"),
                                 value.decode("utf-8", "replace")[:256])  # fmt: skip
        return found

    @staticmethod
    def _root_file(base: Path, name: str) -> str:
        """A small file as the process sees it (its container's root), "" when unreadable."""
        try:
            with (base / "root" / name).open("rb") as handle:
                return handle.read(4096).decode("utf-8", "replace")
        except OSError:
            return ""


def current_user() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None
