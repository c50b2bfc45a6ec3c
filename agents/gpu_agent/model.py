"""The readings a backend produces: the JSON contract with the portal.

Units live in the key names so the portal never has to guess. A field a card
cannot report is ``None`` here and absent from the JSON: zero would be a lie
(a T4 without an energy counter has not consumed 0 mJ).

Keys are only ever added to this contract, never renamed or removed: the portal's
poller and services read ``hostname``, ``agent.version``, the versions and the
identity and live fields of ``gpus[]``. Those fields, declared in ``schema.py``, and
nothing else, make the compact "portal" view (``PORTAL_GPU_FIELDS``, ``to_portal_dict``;
see ``snapshot_views.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from agents.gpu_agent import schema

# "lost": the card stopped answering, or its vendor tool failed (the portal flags it).
# "warning" / "unhealthy": a vendor tool's own health word (npu-smi's Warning, Alarm ...),
# in ``health_detail``; the portal records and shows them as such (issue #25).
Health = Literal["ok", "warning", "unhealthy", "lost"]

# The portal view: per card, the fields of the reading schema (identity, live readings,
# health) and the processes; per process, the schema's process fields. The portal's
# contract with the agent, documented in docs/agent.md: it grows with the schema.
PORTAL_GPU_FIELDS = (*schema.GPU_FIELD_NAMES, schema.PROCESSES)
PORTAL_PROCESS_FIELDS = schema.PROCESS_FIELD_NAMES
# The plain values among them; processes are objects, reduced on their own.
_PORTAL_GPU_VALUES = schema.GPU_FIELD_NAMES


# Field names per (class, skipped names), in declared order: dataclasses.fields() rebuilds
# its tuple on every call, which was a third of the cost of encoding a snapshot.
_NAMES: dict[tuple[type, frozenset[str]], tuple[str, ...]] = {}
# Values that are written as they are: checked first because most values are these.
_PLAIN = (int, float, str)


def _present(obj: Any, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    key = (type(obj), skip)
    names = _NAMES.get(key)
    if names is None:
        # Declared order reads better in curl output.
        names = _NAMES[key] = tuple(f.name for f in fields(obj) if f.name not in skip)
    out: dict[str, Any] = {}
    values = vars(obj)  # a dict lookup per field instead of attribute access
    for name in names:
        value = values[name]
        if value is None:
            continue
        if isinstance(value, _PLAIN):
            pass
        elif isinstance(value, list):
            value = [v.to_dict() if hasattr(v, "to_dict") else v for v in value]
        elif hasattr(value, "to_dict"):
            value = value.to_dict()
        out[name] = value
    return out


@dataclass
class ProcessReading:
    """A compute process on one card, with who runs it and what it belongs to."""

    pid: int
    # None when the driver cannot tell (Windows WDDM, some MIG setups): absent, not 0.
    memory_used_mib: int | None = None
    user: str | None = None
    uid: int | None = None
    command: str | None = None
    # Kubernetes or MIG placement, when known.
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    # The allocation named by the process's environment; the environment itself never
    # leaves the node (it holds the user's secrets), only this one value does.
    allocation_env: str | None = None
    # The memory limit that holds it (gpu_agent/limits.py): (how, MiB), "none", or None
    # when the environment could not be read. Node-only, as the environment is.
    memory_limit: tuple[str, int] | str | None = None
    # Filled in by attribution, not by backends.
    allocation_id: str | None = None
    attributed_by: Literal["environment", "owner"] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _present(self, frozenset({"allocation_env", "memory_limit"}))

    def to_portal_dict(self) -> dict[str, Any]:
        values = vars(self)
        out: dict[str, Any] = {}
        for name in PORTAL_PROCESS_FIELDS:
            value = values.get(name)  # get: a field the portal reads may not exist here yet
            if value is not None:
                out[name] = value
        return out


@dataclass
class XidCount:
    """How often one XID code was seen on a card since the agent started, and when last."""

    xid: int
    count: int
    last_seen_at: float

    def to_dict(self) -> dict[str, Any]:
        return _present(self)


@dataclass
class MigDevice:
    index: int
    uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    # Added with the per-instance FB_FREE series; NVML's own figure, not total - used.
    memory_free_mib: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _present(self)


@dataclass
class PodRef:
    """A Kubernetes container holding a card, from the kubelet's pod-resources API."""

    pod: str
    namespace: str
    container: str

    def to_dict(self) -> dict[str, Any]:
        return _present(self)


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
    # Added by the node-agent issue; all optional, all absent where unsupported.
    memory_reserved_mib: int | None = None
    memory_temperature_c: int | None = None
    fan_speed_pct: int | None = None
    encoder_utilization_pct: int | None = None
    decoder_utilization_pct: int | None = None
    pcie_tx_bytes_per_s: int | None = None
    pcie_rx_bytes_per_s: int | None = None
    pcie_replay_total: int | None = None
    # Profiling ratios (0.0-1.0), as DCGM's PROF fields; NVML has them through GPM on Hopper+.
    gr_engine_active_ratio: float | None = None
    tensor_active_ratio: float | None = None
    dram_active_ratio: float | None = None
    # Volatile ECC counters (since the driver loaded), as nvidia-smi's "Volatile" column.
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    row_remap_failure: bool | None = None
    xid_last: int | None = None
    xid_errors: list[XidCount] | None = None
    mig_mode: Literal["enabled", "disabled"] | None = None
    mig_devices: list[MigDevice] | None = None
    processes: list[ProcessReading] | None = None
    pods: list[PodRef] | None = None
    # Added by the accelerators issue (#25): who made the card ("nvidia", "ascend", "hygon",
    # "amd"), and why it is not ok, in the vendor tool's words.
    vendor: str | None = None
    health_detail: str | None = None
    # Readings a vendor tool shows that NVML has no field for (Ascend's DDR beside its HBM,
    # hugepages; Hygon's VRAM%), by name; /metrics writes them under the vendor's names.
    vendor_readings: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _present(self)

    def to_portal_dict(self) -> dict[str, Any]:
        values = vars(self)
        out: dict[str, Any] = {}
        for name in _PORTAL_GPU_VALUES:
            value = values[name]
            if value is not None:
                out[name] = value
        processes = values["processes"]
        if processes is not None:
            out["processes"] = [p.to_portal_dict() for p in processes]
        return out


@dataclass(frozen=True)
class AgentInfo:
    version: str
    backend: str
    interval_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "backend": self.backend, "interval_s": self.interval_s}


@dataclass
class Violation:
    """A process using a card outside what the portal allocated."""

    kind: Literal["unallocated", "over_memory", "wrong_gpu", "unlimited"]
    gpu_uuid: str | None
    pids: list[int]
    user: str | None = None
    allocation_id: str | None = None
    memory_used_mib: int | None = None
    memory_limit_mib: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _present(self)


@dataclass
class AllocationUsage:
    """What one allocation's processes use on its card right now."""

    allocation_id: str
    gpu_uuid: str
    memory_limit_mib: int
    compute_pct: int
    process_count: int = 0
    memory_used_mib: int = 0

    def to_dict(self) -> dict[str, Any]:
        return _present(self)


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
    # Filled in by the collector from the desired slices; None when none were sent.
    allocations: list[AllocationUsage] | None = None
    violations: list[Violation] | None = None
    # The desired state's generation attributed above; None when none was sent.
    desired_generation: int | None = None

    def _node_keys(self, out: dict[str, Any]) -> dict[str, Any]:
        """The node's own keys, shared by both views, added to ``out``."""
        if self.agent is not None:
            out["agent"] = self.agent.to_dict()
        out["hostname"] = self.hostname
        if self.driver_version is not None:
            out["driver_version"] = self.driver_version
        if self.cuda_version is not None:
            out["cuda_version"] = self.cuda_version
        out["collected_at"] = self.collected_at
        out["collect_duration_s"] = self.collect_duration_s
        if self.desired_generation is not None:
            out["desired_generation"] = self.desired_generation
        return out

    def _report(self, out: dict[str, Any]) -> dict[str, Any]:
        """The slices report (both views): what each allocation uses, and violations."""
        if self.allocations is not None:
            out["allocations"] = [a.to_dict() for a in self.allocations]
        if self.violations is not None:
            out["violations"] = [v.to_dict() for v in self.violations]
        return out

    def to_dict(self) -> dict[str, Any]:
        out = self._node_keys({})
        out["gpus"] = [gpu.to_dict() for gpu in self.gpus]
        return self._report(out)

    def to_portal_dict(self) -> dict[str, Any]:
        """The portal view: node keys as ``to_dict``, cards reduced, the slices report
        (the pools confirm and show it)."""
        out = self._node_keys({"view": "portal"})
        out["gpus"] = [gpu.to_portal_dict() for gpu in self.gpus]
        return self._report(out)
