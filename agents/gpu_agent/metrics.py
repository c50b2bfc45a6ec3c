"""Prometheus text exposition (format 0.0.4) with dcgm-exporter's names and labels.

Matching dcgm-exporter exactly means existing Grafana dashboards and alert rules
work unchanged against this agent. The text is written by hand: it is a few
dozen lines per node, and prometheus_client would be a dependency on every node.
"""

from __future__ import annotations

from agents.gpu_agent.model import GpuReading, NodeSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (series, type, help, GpuReading field), in dcgm-exporter's default-counters.csv order,
# with its help texts verbatim. Only counters an NVML-level reading can fill are listed.
DCGM_COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "energy_mj",
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization_gpu_pct"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "utilization_memory_pct"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory_free_mib"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory_used_mib"),
)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)


def _gpu_labels(gpu: GpuReading, snapshot: NodeSnapshot) -> str:
    # Same names and order as dcgm-exporter, including its mixed casing.
    return _labels(
        [
            ("gpu", str(gpu.index)),
            ("UUID", gpu.uuid or ""),
            ("pci_bus_id", gpu.pci_bus_id or ""),
            ("device", f"nvidia{gpu.index}"),
            ("modelName", gpu.name or ""),
            ("Hostname", snapshot.hostname),
            ("DCGM_FI_DRIVER_VERSION", snapshot.driver_version or ""),
        ]
    )


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


def render(snapshot: NodeSnapshot) -> str:
    lines: list[str] = []
    gpu_labels = [(gpu, _gpu_labels(gpu, snapshot)) for gpu in snapshot.gpus]
    for series, kind, help_text, field in DCGM_COUNTERS:
        samples = [
            f"{series}{{{labels}}} {_number(value)}"
            for gpu, labels in gpu_labels
            if (value := getattr(gpu, field)) is not None
        ]
        if not samples:
            continue
        lines += [f"# HELP {series} {help_text}", f"# TYPE {series} {kind}", *samples]
    host = _labels([("Hostname", snapshot.hostname)])
    for series, help_text, value in (
        (
            "gpu_agent_last_collect_success_timestamp_seconds",
            "Unix time of the agent's last successful collection.",
            snapshot.collected_at,
        ),
        (
            "gpu_agent_collect_duration_seconds",
            "Seconds the agent's last successful collection took.",
            snapshot.collect_duration_s,
        ),
    ):
        lines += [
            f"# HELP {series} {help_text}",
            f"# TYPE {series} gauge",
            f"{series}{{{host}}} {_number(value)}",
        ]
    return "\n".join(lines) + "\n"
