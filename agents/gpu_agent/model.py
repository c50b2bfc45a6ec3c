"""The readings a backend produces: the JSON contract with the portal.

Units live in the key names so the portal never has to guess. A field a card
cannot report is ``None`` here and absent from the JSON: zero would be a lie
(a T4 without an energy counter has not consumed 0 mJ).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

Health = Literal["ok", "lost"]


@dataclass
class GpuReading:
    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    serial: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    energy_mj: int | None = None
    health: Health = "ok"

    def to_dict(self) -> dict[str, Any]:
        # Iterating fields() keeps the declared key order, which reads better in curl output.
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value
        return out


@dataclass(frozen=True)
class AgentInfo:
    version: str
    backend: str
    interval_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "backend": self.backend, "interval_s": self.interval_s}


@dataclass
class NodeSnapshot:
    hostname: str
    collected_at: float
    gpus: list[GpuReading] = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    collect_duration_s: float = 0.0
    # Filled in by the collector, which knows the interval; backends leave it alone.
    agent: AgentInfo | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.agent is not None:
            out["agent"] = self.agent.to_dict()
        out["hostname"] = self.hostname
        if self.driver_version is not None:
            out["driver_version"] = self.driver_version
        if self.cuda_version is not None:
            out["cuda_version"] = self.cuda_version
        out["collected_at"] = self.collected_at
        out["collect_duration_s"] = self.collect_duration_s
        out["gpus"] = [gpu.to_dict() for gpu in self.gpus]
        return out
