"""Prometheus text exposition (format 0.0.4) with dcgm-exporter's names and labels.

Matching dcgm-exporter exactly means existing Grafana dashboards and alert rules
work unchanged against this agent. The text is written by hand: it is a few
dozen lines per node, and prometheus_client would be a dependency on every node.

Conversions to DCGM's units happen in the backends (the snapshot already holds
W, MiB, B/s and mJ), so one number means the same in JSON and here.
"""

from __future__ import annotations

from collections import Counter

from agents.gpu_agent.backends.xid import xid_message
from agents.gpu_agent.exposition import escape_label_value, family, labels, number
from agents.gpu_agent.metrics_agent import render_agent_series
from agents.gpu_agent.metrics_vendor import render_vendor_series
from agents.gpu_agent.model import GpuReading, MigDevice, NodeSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# (series, type, help, GpuReading field): dcgm-exporter's default-counters.csv, in its order
# and with its help texts verbatim, for every counter an NVML-level reading can fill.
# Not here: NVLINK_BANDWIDTH_TOTAL (needs DCGM's NVLink sampling) and VGPU_LICENSE_STATUS
# (vGPU guests only). XID_ERRORS is written separately for its err_code/err_msg labels.
DCGM_COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock_mhz"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "Memory temperature (in C).",
        "memory_temperature_c",
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temperature_c"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "energy_mj",
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "Total number of PCIe retries.",
        "pcie_replay_total",
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "utilization_gpu_pct"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "utilization_memory_pct"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "encoder_utilization_pct"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "decoder_utilization_pct"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "memory_free_mib"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "memory_used_mib"),
    (
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        "memory_reserved_mib",
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "remapped_rows_uncorrectable",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "remapped_rows_correctable",
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        "row_remap_failure",
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        "gr_engine_active_ratio",
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_active_ratio",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "dram_active_ratio",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        "pcie_tx_bytes_per_s",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        "pcie_rx_bytes_per_s",
    ),
)
XID_SERIES = ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.")
# DCGM fields outside the default set that the agent reads anyway; DCGM's names, so a
# dcgm-exporter configured with them produces the same series.
DCGM_EXTRA: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed (in %).", "fan_speed_pct"),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).", "power_limit_w"),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "ecc_corrected_total",
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "ecc_uncorrected_total",
    ),
)


# Per MIG instance, dcgm-exporter repeats the memory series with the instance's labels;
# the whole-card series stay. (series, MigDevice field)
# The device label names the card's device file, as dcgm-exporter's "nvidia0" does:
# /dev/davinciN on Ascend, the DRM card (/dev/dri/cardN) on Hygon and AMD.
DEVICE_PREFIX = {"nvidia": "nvidia", "ascend": "davinci", "hygon": "card", "amd": "card"}

MIG_SERIES = {
    "DCGM_FI_DEV_FB_FREE": "memory_free_mib",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
}


def gpu_label_pairs(
    gpu: GpuReading,
    snapshot: NodeSnapshot,
    allocation: str | None = None,
    mig: MigDevice | None = None,
) -> list[tuple[str, str]]:
    # Same names and order as dcgm-exporter, including its mixed casing.
    pairs = [
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid or ""),
        ("pci_bus_id", gpu.pci_bus_id or ""),
        ("device", f"{DEVICE_PREFIX.get(gpu.vendor or 'nvidia', gpu.vendor)}{gpu.index}"),
        ("modelName", gpu.name or ""),
    ]
    if mig is not None:
        # dcgm-exporter puts the instance right after the card's labels, before the host.
        gi = mig.gpu_instance_id
        pairs += [("GPU_I_PROFILE", mig.profile or ""), ("GPU_I_ID", "" if gi is None else str(gi))]
    pairs += [
        ("Hostname", snapshot.hostname),
        ("DCGM_FI_DRIVER_VERSION", snapshot.driver_version or ""),
    ]
    # The card's pods are the union over its instances: which pod holds which instance is
    # not kept, so an instance's series carry no pod rather than perhaps the wrong one.
    if gpu.pods and mig is None:
        # As dcgm-exporter: the container holding the card. A card shared by several pods
        # (time-slicing) is labelled with the first; the snapshot lists them all.
        pod = gpu.pods[0]
        pairs += [("container", pod.container), ("namespace", pod.namespace), ("pod", pod.pod)]
    if allocation is not None:
        pairs.append(("allocation", allocation))
    return pairs


def _sole_allocations(snapshot: NodeSnapshot) -> dict[str, str]:
    """GPU UUID -> allocation id, for cards that hold exactly one slice.

    A card holding several slices cannot carry one allocation label; their usage
    is in the gpu_agent_allocation_* series instead.
    """
    per_gpu = Counter(a.gpu_uuid for a in snapshot.allocations or ())
    return {
        a.gpu_uuid: a.allocation_id for a in snapshot.allocations or () if per_gpu[a.gpu_uuid] == 1
    }


def render(snapshot: NodeSnapshot) -> str:
    lines: list[str] = []
    sole = _sole_allocations(snapshot)
    gpu_labels = [
        (gpu, labels(gpu_label_pairs(gpu, snapshot, sole.get(gpu.uuid or ""))))
        for gpu in snapshot.gpus
    ]

    def per_gpu(field: str) -> list[str]:
        return [
            f"{{{text}}} {number(value)}"
            for gpu, text in gpu_labels
            if (value := getattr(gpu, field)) is not None
        ]

    mig_labels = [
        (mig, labels(gpu_label_pairs(gpu, snapshot, sole.get(mig.uuid or ""), mig)))
        for gpu in snapshot.gpus
        for mig in gpu.mig_devices or ()
    ]

    def per_mig(series: str) -> list[str]:
        field = MIG_SERIES.get(series)
        if field is None:
            return []
        return [
            f"{{{text}}} {number(value)}"
            for mig, text in mig_labels
            if (value := getattr(mig, field)) is not None
        ]

    for series, kind, help_text, field in DCGM_COUNTERS + DCGM_EXTRA:
        samples = per_gpu(field) + per_mig(series)
        family(lines, series, kind, help_text, [series + s for s in samples])
    xid_samples = [
        f"{XID_SERIES[0]}{{{text},"
        f"{labels([('err_code', str(gpu.xid_last)), ('err_msg', _xid_msg(gpu.xid_last))])}}} "
        f"{gpu.xid_last}"
        for gpu, text in gpu_labels
        if gpu.xid_last is not None
    ]
    family(lines, *XID_SERIES, xid_samples)
    render_agent_series(lines, snapshot, gpu_labels)
    render_vendor_series(lines, snapshot)
    return "\n".join(lines) + "\n"


def _xid_msg(xid: int) -> str:
    # dcgm-exporter labels "no XID yet" (value 0) as an unknown error; keep its wording.
    return xid_message(xid)


__all__ = ["CONTENT_TYPE", "escape_label_value", "render"]
