"""The NVML reads beyond the basics: health counters, PCIe, MIG and processes.

Each is one call through the backend's ``get`` (an unsupported field becomes
None and is left out of the snapshot; a lost card raises :class:`GpuLost`).
Conversions to the units in the snapshot's key names happen here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.gpu_agent.backends.procinfo import ProcessInspector
from agents.gpu_agent.model import MigDevice, ProcessReading

Get = Callable[..., Any]
_MIB = 1024 * 1024
# NVML reports PCIe throughput in KiB/s; DCGM's PROF_PCIE_*_BYTES are bytes per second.
_KIB = 1024
# nvmlFieldValue_t.valueType -> the union member that holds the value.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}
# gpuInstanceId / computeInstanceId when the process is not in a MIG instance.
_NO_INSTANCE = 0xFFFFFFFF


class GpuLost(Exception):
    """Raised inside one GPU's read to abandon it as soon as NVML reports it lost."""


def _field_value(nv: Any, get: Get, index: int, handle: Any, field_id: int, name: str) -> Any:
    values = get(index, name, nv.nvmlDeviceGetFieldValues, handle, [field_id])
    if not values:
        return None
    value = values[0]
    # Field queries report per-field status inside the struct rather than raising.
    if value.nvmlReturn == nv.NVML_ERROR_GPU_IS_LOST:
        raise GpuLost
    if value.nvmlReturn != nv.NVML_SUCCESS:
        return None
    member = _VALUE_MEMBERS.get(value.valueType)
    return getattr(value.value, member) if member else None


def read_extended(nv: Any, get: Get, index: int, handle: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    memory_temp = _field_value(nv, get, index, handle, nv.NVML_FI_DEV_MEMORY_TEMP, "memory_temp")
    # 0 here means "no sensor" on GDDR boards, not a frozen memory chip.
    if memory_temp:
        out["memory_temperature_c"] = int(memory_temp)
    out["fan_speed_pct"] = get(index, "fan", nv.nvmlDeviceGetFanSpeed, handle)
    enc = get(index, "encoder", nv.nvmlDeviceGetEncoderUtilization, handle)
    if enc is not None:
        out["encoder_utilization_pct"] = enc[0]
    dec = get(index, "decoder", nv.nvmlDeviceGetDecoderUtilization, handle)
    if dec is not None:
        out["decoder_utilization_pct"] = dec[0]
    for key, counter in (
        ("pcie_tx_bytes_per_s", nv.NVML_PCIE_UTIL_TX_BYTES),
        ("pcie_rx_bytes_per_s", nv.NVML_PCIE_UTIL_RX_BYTES),
    ):
        kib_s = get(index, key, nv.nvmlDeviceGetPcieThroughput, handle, counter)
        if kib_s is not None:
            out[key] = kib_s * _KIB
    out["pcie_replay_total"] = get(index, "pcie_replay", nv.nvmlDeviceGetPcieReplayCounter, handle)
    for key, kind in (
        ("ecc_corrected_total", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED),
        ("ecc_uncorrected_total", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
    ):
        out[key] = get(
            index, key, nv.nvmlDeviceGetTotalEccErrors, handle, kind, nv.NVML_VOLATILE_ECC
        )
    rows = get(index, "remapped_rows", nv.nvmlDeviceGetRemappedRows, handle)
    if rows is not None:
        correctable, uncorrectable, _pending, failure = rows
        out["remapped_rows_correctable"] = correctable
        out["remapped_rows_uncorrectable"] = uncorrectable
        out["row_remap_failure"] = bool(failure)
    mig = get(index, "mig_mode", nv.nvmlDeviceGetMigMode, handle)
    if mig is not None:
        out["mig_mode"] = "enabled" if mig[0] == nv.NVML_DEVICE_MIG_ENABLE else "disabled"
    return out


def _mig_profile(name: str | None) -> str | None:
    # MIG device names read "NVIDIA A100-SXM4-40GB MIG 1g.5gb": the profile is the last word.
    if name and " MIG " in name:
        return name.rsplit(" ", 1)[-1]
    return None


def read_mig_devices(nv: Any, get: Get, index: int, handle: Any) -> list[MigDevice]:
    devices: list[MigDevice] = []
    count = get(index, "mig_count", nv.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    for slot in range(count):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost from exc
            continue  # NotFound: an empty slot
        device = MigDevice(
            index=slot,
            uuid=get(index, "mig_uuid", nv.nvmlDeviceGetUUID, mig),
            gpu_instance_id=get(index, "mig_gi", nv.nvmlDeviceGetGpuInstanceId, mig),
            compute_instance_id=get(index, "mig_ci", nv.nvmlDeviceGetComputeInstanceId, mig),
            profile=_mig_profile(get(index, "mig_name", nv.nvmlDeviceGetName, mig)),
        )
        mem = get(index, "mig_memory", nv.nvmlDeviceGetMemoryInfo, mig)
        if mem is not None:
            device.memory_total_mib = mem.total // _MIB
            device.memory_used_mib = mem.used // _MIB
            device.memory_free_mib = mem.free // _MIB
        devices.append(device)
    return devices


def read_processes(
    nv: Any, get: Get, index: int, handle: Any, inspector: ProcessInspector
) -> list[ProcessReading] | None:
    running = get(index, "processes", nv.nvmlDeviceGetComputeRunningProcesses, handle)
    if running is None:
        return None
    processes = []
    for proc in running:
        info = inspector.info(proc.pid)
        used = proc.usedGpuMemory
        gi = getattr(proc, "gpuInstanceId", _NO_INSTANCE)
        ci = getattr(proc, "computeInstanceId", _NO_INSTANCE)
        processes.append(
            ProcessReading(
                pid=proc.pid,
                memory_used_mib=used // _MIB if used is not None else None,
                user=info.user,
                uid=info.uid,
                command=info.command,
                gpu_instance_id=gi if gi != _NO_INSTANCE else None,
                compute_instance_id=ci if ci != _NO_INSTANCE else None,
                allocation_env=info.allocation_env,
                memory_limit=info.memory_limit,
            )
        )
    return processes
