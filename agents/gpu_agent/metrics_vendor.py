"""Vendor exporters' own series for cards that are not NVIDIA's, beside the DCGM names.

So dashboards built on Huawei's npu-exporter (``npu_chip_info_*``), Hygon's dcu-exporter
(``dcu_*``), Cambricon's mlu-exporter (``mlu_*``) or AMD's device-metrics-exporter
(``gpu_*``) keep working against this agent.
Names and label names are the exporters' (listed in shared/anchors/accelerators/*/SOURCE.md);
units are theirs where known: npu-exporter's memory in MB (npu-smi's binary MB), the DCU
and mlu-exporter's in bytes, AMD's in MB. A reading the tool did not show writes no sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.gpu_agent.exposition import family, labels, number
from agents.gpu_agent.model import GpuReading, NodeSnapshot

MIB = 1024 * 1024
Value = Callable[[GpuReading], Any]


def _extra(name: str, scale: float = 1) -> Value:
    def read(gpu: GpuReading) -> Any:
        value = (gpu.vendor_readings or {}).get(name)
        return None if value is None else value * scale

    return read


def _field(name: str, scale: float = 1) -> Value:
    def read(gpu: GpuReading) -> Any:
        value = getattr(gpu, name)
        if value is None or scale == 1:
            return value
        return value * scale

    return read


def _healthy(gpu: GpuReading) -> int:
    # npu-exporter: 1 healthy, 0 not; a Warning is still a working chip.
    return int(gpu.health in ("ok", "warning"))


def _ascend_labels(gpu: GpuReading, snapshot: NodeSnapshot) -> list[tuple[str, str]]:
    pod = gpu.pods[0] if gpu.pods else None
    # npu-smi info prints no VDie ID: vdie_id carries the agent's stable card id instead.
    return [
        ("id", str(gpu.index)),
        ("model_name", gpu.name or ""),
        ("vdie_id", gpu.uuid or ""),
        ("pcie_bus_info", gpu.pci_bus_id or ""),
        ("namespace", pod.namespace if pod else ""),
        ("pod_name", pod.pod if pod else ""),
        ("container_name", pod.container if pod else ""),
    ]


def _hygon_labels(gpu: GpuReading, snapshot: NodeSnapshot) -> list[tuple[str, str]]:
    pod = gpu.pods[0] if gpu.pods else None
    pairs = [
        ("device_id", gpu.uuid or ""),
        ("minor_number", str(gpu.index)),
        ("node", snapshot.hostname),
    ]
    if pod:
        pairs += [
            ("dcu_pod_namespace", pod.namespace),
            ("dcu_pod_name", pod.pod),
            ("container", pod.container),
        ]
    return pairs


def _amd_labels(gpu: GpuReading, snapshot: NodeSnapshot) -> list[tuple[str, str]]:
    pairs = [
        ("gpu_id", str(gpu.index)),
        ("card_model", gpu.name or ""),
        ("hostname", snapshot.hostname),
    ]
    if gpu.pods:
        pairs.append(("pod", gpu.pods[0].pod))
    return pairs


def _cambricon_labels(gpu: GpuReading, snapshot: NodeSnapshot) -> list[tuple[str, str]]:
    # mlu-exporter's common labels; mcu, node_ip and type are not in cnmon's table.
    return [
        ("driver", snapshot.driver_version or ""),
        ("mcu", ""),
        ("mlu", str(gpu.index)),
        ("model", gpu.name or ""),
        ("node", snapshot.hostname),
        ("node_ip", ""),
        ("sn", gpu.serial or ""),
        ("type", ""),
        ("uuid", gpu.uuid or ""),
    ]


# vendor -> (labels, [(series, help, value)])
SERIES: dict[str, tuple[Callable[..., list[tuple[str, str]]], list[tuple[str, str, Value]]]] = {
    "ascend": (
        _ascend_labels,
        [
            ("npu_chip_info_utilization", "AI core utilization (in %).",
             _field("utilization_gpu_pct")),
            ("npu_chip_info_hbm_used_memory", "HBM used (in MB).", _extra("hbm_used_mib")),
            ("npu_chip_info_hbm_total_memory", "HBM total (in MB).", _extra("hbm_total_mib")),
            ("npu_chip_info_used_memory", "DDR used (in MB).", _extra("ddr_used_mib")),
            ("npu_chip_info_total_memory", "DDR total (in MB).", _extra("ddr_total_mib")),
            ("npu_chip_info_temperature", "Chip temperature (in C).", _field("temperature_c")),
            ("npu_chip_info_power", "Chip power (in W).", _field("power_w")),
            ("npu_chip_info_health_status", "1 when the chip is healthy, else 0.", _healthy),
        ],
    ),
    "hygon": (
        _hygon_labels,
        [
            ("dcu_temp", "DCU temperature (in C).", _field("temperature_c")),
            ("dcu_power_usage", "DCU power (in W).", _field("power_w")),
            ("dcu_powercap", "DCU power cap (in W).", _field("power_limit_w")),
            ("dcu_utilizationrate", "DCU utilization (0-100).", _field("utilization_gpu_pct")),
            ("dcu_memorycap_bytes", "DCU memory total (in bytes).",
             _field("memory_total_mib", MIB)),
            ("dcu_usedmemory_bytes", "DCU memory used (in bytes).",
             _field("memory_used_mib", MIB)),
            ("dcu_memory_remaining", "DCU memory free (in bytes).",
             _field("memory_free_mib", MIB)),
        ],
    ),
    "cambricon": (
        _cambricon_labels,
        [
            ("mlu_utilization", "MLU utilization (in %).", _field("utilization_gpu_pct")),
            ("mlu_memory_used", "MLU memory used (in bytes).", _field("memory_used_mib", MIB)),
            ("mlu_memory_total", "MLU memory total (in bytes).",
             _field("memory_total_mib", MIB)),
            ("mlu_memory_free", "MLU memory free (in bytes).", _field("memory_free_mib", MIB)),
            ("mlu_temperature", "Board temperature (in C).", _field("temperature_c")),
            ("mlu_power_usage", "Power (in W).", _field("power_w")),
            ("mlu_power_current_limit", "Power limit (in W).", _field("power_limit_w")),
            ("mlu_health", "1 when the card is healthy, else 0.", _healthy),
        ],
    ),
    "amd": (
        _amd_labels,
        [
            ("gpu_gfx_activity", "Graphics engine activity (in %).",
             _field("utilization_gpu_pct")),
            ("gpu_umc_activity", "Memory controller activity (in %).",
             _field("utilization_memory_pct")),
            ("gpu_used_vram", "VRAM used (in MB).", _field("memory_used_mib")),
            ("gpu_total_vram", "VRAM total (in MB).", _field("memory_total_mib")),
            ("gpu_edge_temperature", "Edge temperature (in C).", _field("temperature_c")),
            ("gpu_memory_temperature", "Memory temperature (in C).",
             _field("memory_temperature_c")),
            ("gpu_average_package_power", "Average package power (in W).", _field("power_w")),
        ],
    ),
}  # fmt: skip


def render_vendor_series(lines: list[str], snapshot: NodeSnapshot) -> None:
    for vendor, (make_labels, series) in SERIES.items():
        cards = [
            (gpu, labels(make_labels(gpu, snapshot)))
            for gpu in snapshot.gpus
            if gpu.vendor == vendor and gpu.health != "lost"
        ]
        if not cards:
            continue
        for name, help_text, read in series:
            samples = [
                f"{name}{{{text}}} {number(value)}"
                for gpu, text in cards
                if (value := read(gpu)) is not None
            ]
            family(lines, name, "gauge", help_text, samples)
        if vendor == "ascend":
            host = labels([("node", snapshot.hostname)])
            family(lines, "machine_npu_nums", "gauge", "NPU chips on the node.",
                   [f"machine_npu_nums{{{host}}} {len(cards)}"])  # fmt: skip
