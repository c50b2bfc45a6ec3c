"""The simulator impersonating other vendors' cards (``--vendor``), for a mixed demo fleet.

A simulated card is stepped by the same physical model; what the node reports is then cut
down to what that vendor's tool really shows (``backends/smi``): npu-smi has no clocks, no
energy, no power limit; hy-smi's JSON no clocks; cnmon no memory temperature; none of them
PCIe byte rates, profiling ratios, ECC counters, XIDs or MIG. So a page built on the demo
shows the gaps a real Ascend or Hygon node will have.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from agents.gpu_agent.model import GpuReading


@dataclass(frozen=True)
class VendorProfile:
    model: str  # the default model when --model is not given
    driver_version: str
    # GpuReading fields the vendor's backend fills, beyond identity, health and processes.
    readings: frozenset[str]
    uuid_prefix: str


_ALWAYS = frozenset(
    {"index", "uuid", "name", "pci_bus_id", "health", "health_detail", "processes", "pods"}
)
_MEMORY = frozenset({"memory_total_mib", "memory_used_mib", "memory_free_mib"})

VENDORS: dict[str, VendorProfile] = {
    "ascend": VendorProfile(
        "Ascend 910B2C", "23.0.3",
        _MEMORY | {"utilization_gpu_pct", "temperature_c", "power_w"}, "ascend-",
    ),
    "hygon": VendorProfile(
        "DCU K100_AI", "6.3.8",
        _MEMORY | {"serial", "utilization_gpu_pct", "temperature_c", "memory_temperature_c",
                   "power_w"},
        "",
    ),
    "amd": VendorProfile(
        "Arcturus GL-XL [Instinct MI100]", "6.3.6",
        _MEMORY | {"utilization_gpu_pct", "utilization_memory_pct", "temperature_c",
                   "memory_temperature_c", "power_w", "power_limit_w", "sm_clock_mhz",
                   "mem_clock_mhz", "pcie_replay_total"},
        "0x",
    ),
    "metax": VendorProfile(
        "MXC500", "2.5.014",
        _MEMORY | {"utilization_gpu_pct", "temperature_c", "power_w", "power_limit_w"}, "metax-",
    ),
    "moorethreads": VendorProfile(
        "MTT S4000", "2.7.0", _MEMORY | {"utilization_gpu_pct", "temperature_c"},
        "moorethreads-",
    ),
    "cambricon": VendorProfile(
        "MLU370-X8", "5.10.13",
        _MEMORY | {"utilization_gpu_pct", "temperature_c", "power_w", "power_limit_w",
                   "fan_speed_pct"},
        "cambricon-",
    ),
}  # fmt: skip

_FIELDS = tuple(f.name for f in fields(GpuReading))


def vendor_uuid(vendor: str, nvidia_style: str) -> str:
    """The simulated card's id in the vendor's form: the tools that print none get the
    agent's derived ``<vendor>-<uuid>``, hy-smi and rocm-smi a hex Unique ID."""
    profile = VENDORS[vendor]
    hexdigits = nvidia_style.removeprefix("GPU-")
    if profile.uuid_prefix in ("", "0x"):
        return profile.uuid_prefix + hexdigits.replace("-", "")[:16]
    return profile.uuid_prefix + hexdigits


def impersonate(reading: GpuReading, vendor: str) -> GpuReading:
    """``reading`` as the vendor's backend would report it: other fields absent."""
    profile = VENDORS[vendor]
    keep = _ALWAYS | profile.readings
    values = vars(reading)
    for name in _FIELDS:
        if name not in keep and name not in ("vendor", "vendor_readings"):
            values[name] = None
    reading.vendor = vendor
    if (
        reading.pci_bus_id
        and len(reading.pci_bus_id.split(":")[0]) == 8
        and vendor != "moorethreads"
    ):
        # The vendors' tools print a 4-digit PCI domain (mthreads-gmi NVML's 8).
        reading.pci_bus_id = reading.pci_bus_id[4:]
    if reading.power_w is not None:
        reading.power_w = round(reading.power_w, 1)  # the tools print one decimal
    if reading.health == "lost":
        reading.health_detail = f"{vendor} tool: the card did not answer"
        return reading
    if vendor == "ascend" and reading.memory_total_mib is not None:
        # npu-smi's HBM column, under npu-exporter's names.
        reading.vendor_readings = {
            "hbm_used_mib": reading.memory_used_mib or 0,
            "hbm_total_mib": reading.memory_total_mib,
        }
    return reading
