"""Who runs a GPU process and which allocation it claims, read from /proc.

NVML only gives PIDs and memory. The owner, command line and the allocation
variable come from ``/proc/<pid>``, read once when a PID first shows up on a card
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


class ProcessInspector:
    def __init__(self, proc_root: Path = Path("/proc"), env_var: str = ALLOCATION_ENV_VAR) -> None:
        self._root = proc_root
        self._needle = env_var.encode() + b"="
        self._cache: dict[int, ProcessInfo] = {}
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
        return ProcessInfo(
            uid=uid,
            user=self._user(uid) if uid is not None else None,
            command=self._command(base),
            allocation_env=self._allocation(base),
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

    def _allocation(self, base: Path) -> str | None:
        try:
            environ = (base / "environ").read_bytes()
        except OSError as exc:
            log.debug("cannot read %s/environ: %s", base, exc)
            return None
        for entry in environ.split(b"\0"):
            if entry.startswith(self._needle):
                value = entry[len(self._needle) :].decode("utf-8", "replace").strip()
                return value or None
        return None


def current_user() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None
