"""Desired state: the slices the portal placed on this node, and how to launch into them.

The portal PUTs the whole list (it is the source of truth; a partial update
could leave the node half-way). The agent checks it, keeps it in a file so a
restart does not forget it, serves it back with each slice's launch settings,
and uses it to attribute GPU processes to allocations.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agents.gpu_agent.backends.procinfo import ALLOCATION_ENV_VAR

log = logging.getLogger(__name__)

SLICE_KEYS = {"allocation_id", "gpu_uuid", "compute_pct", "memory_mib", "owner"}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_GPU_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]{1,80}$")
MAX_SLICES = 4096


class InvalidDesiredState(ValueError):
    """The body is not a valid list of slices; the message says which part and why."""


@dataclass(frozen=True)
class Slice:
    allocation_id: str
    gpu_uuid: str
    compute_pct: int
    memory_mib: int
    owner: str

    def launch_env(self) -> dict[str, str]:
        """What a process must be started with to live inside this slice.

        CUDA_VISIBLE_DEVICES takes the UUID so the slice survives index reordering;
        inside the process that card is device 0, which is what the per-device limits
        below refer to. HAMi-core reads the CUDA_DEVICE_* limits, an MPS server the
        CUDA_MPS_* ones, the NVIDIA driver (r615 and later) NVIDIA_GPU_MEMORY_LIMIT (MiB,
        a hard cap without HAMi or MPS); the allocation variable lets the agent attribute
        the process, and the limits let it see one started outside them (attribution.py).
        """
        return {
            "CUDA_VISIBLE_DEVICES": self.gpu_uuid,
            "NVIDIA_GPU_MEMORY_LIMIT": str(self.memory_mib),
            "CUDA_DEVICE_MEMORY_LIMIT": f"{self.memory_mib}m",
            "CUDA_DEVICE_SM_LIMIT": str(self.compute_pct),
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(self.compute_pct),
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={self.memory_mib}M",
            ALLOCATION_ENV_VAR: self.allocation_id,
        }

    def to_dict(self, with_launch: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = asdict(self)
        if with_launch:
            out["launch_env"] = self.launch_env()
        return out


def _int(where: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidDesiredState(f"{where}: expected an integer, got {value!r}")
    if not low <= value <= high:
        raise InvalidDesiredState(f"{where}: {value} is outside {low}..{high}")
    return value


def _text(where: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise InvalidDesiredState(f"{where}: expected {what}, got {value!r}")
    return value


def parse_slices(body: Any, known_gpus: set[str] | None = None) -> list[Slice]:
    """Validate a PUT body; ``known_gpus`` (this node's card and MIG UUIDs) when known."""
    if not isinstance(body, dict) or set(body) != {"slices"}:
        raise InvalidDesiredState('expected {"slices": [...]}')
    raw = body["slices"]
    if not isinstance(raw, list):
        raise InvalidDesiredState("slices: expected a list")
    if len(raw) > MAX_SLICES:
        raise InvalidDesiredState(f"slices: at most {MAX_SLICES}")
    slices: list[Slice] = []
    seen: set[str] = set()
    for n, item in enumerate(raw):
        where = f"slices[{n}]"
        if not isinstance(item, dict):
            raise InvalidDesiredState(f"{where}: expected an object")
        if set(item) != SLICE_KEYS:
            missing, extra = SLICE_KEYS - set(item), set(item) - SLICE_KEYS
            raise InvalidDesiredState(
                f"{where}: missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        allocation_id = _text(f"{where}.allocation_id", item["allocation_id"], _ID, "an id")
        if allocation_id in seen:
            raise InvalidDesiredState(f"{where}.allocation_id: {allocation_id} appears twice")
        seen.add(allocation_id)
        gpu_uuid = _text(f"{where}.gpu_uuid", item["gpu_uuid"], _GPU_UUID, "a GPU or MIG UUID")
        if known_gpus is not None and gpu_uuid not in known_gpus:
            raise InvalidDesiredState(f"{where}.gpu_uuid: {gpu_uuid} is not a card on this node")
        owner = item["owner"]
        if not isinstance(owner, str) or not owner.strip() or len(owner) > 256:
            raise InvalidDesiredState(f"{where}.owner: expected a user name")
        slices.append(
            Slice(
                allocation_id=allocation_id,
                gpu_uuid=gpu_uuid,
                compute_pct=_int(f"{where}.compute_pct", item["compute_pct"], 1, 100),
                memory_mib=_int(f"{where}.memory_mib", item["memory_mib"], 1, 16 * 1024 * 1024),
                owner=owner,
            )
        )
    return slices


class DesiredStateStore:
    """The current slices, in memory and (with a path) on disk, replaced atomically."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.slices: list[Slice] | None = None  # None: the portal never sent any
        self.updated_at: float | None = None
        self.generation = 0
        if path is not None and path.exists():
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text())
            self.slices = parse_slices({"slices": data["slices"]})
            self.updated_at = float(data["updated_at"])
            self.generation = int(data["generation"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Refuse to guess: serving no slices is safer than serving half-read ones.
            log.error("ignoring unreadable desired state in %s: %s", path, exc)
            self.slices = None

    def replace(self, slices: list[Slice]) -> dict[str, Any]:
        with self._lock:
            generation = self.generation + 1
            updated_at = time.time()
            document = {
                "generation": generation,
                "updated_at": updated_at,
                "slices": [s.to_dict() for s in slices],
            }
            if self.path is not None:
                self._write(document)  # raises OSError: then nothing changes in memory
            self.slices, self.updated_at, self.generation = slices, updated_at, generation
            return self.document()

    def _write(self, document: dict[str, Any]) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Write, flush, rename: a crash leaves either the old file or the new one.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".desired-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(document, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def document(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "updated_at": self.updated_at,
            "slices": [s.to_dict(with_launch=True) for s in self.slices or ()],
        }
