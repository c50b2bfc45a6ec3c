"""Real NVIDIA GPUs through NVML (the ``pynvml`` module from nvidia-ml-py).

pynvml is imported inside the constructor so the simulator and the tests run on
machines that have neither the module nor a driver. Every field is read on its
own: cards differ in what they support (no energy counter on older boards, no
power reading on some consumer cards), and one unsupported call must not hide
the rest.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from agents.gpu_agent.backends.base import BackendUnavailable
from agents.gpu_agent.model import GpuReading, NodeSnapshot

log = logging.getLogger(__name__)

SIM_HINT = "use --backend sim to run without a GPU"
_MIB = 1024 * 1024


class _GpuLost(Exception):
    """Raised inside one GPU's read to abandon it as soon as NVML reports it lost."""


def _text(value: str | bytes) -> str:
    # Struct fields (PCI bus id) come back as bytes; the function wrappers already decode.
    return value.decode() if isinstance(value, bytes) else value


def _cuda_version(raw: int) -> str:
    # NVML encodes CUDA 12.4 as 12040.
    return f"{raw // 1000}.{raw % 1000 // 10}"


class NvmlBackend:
    name = "nvml"

    def __init__(self, hostname: str) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise BackendUnavailable(
                f"the pynvml module (pip install nvidia-ml-py) is not installed; {SIM_HINT}"
            ) from exc
        self._nv: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise BackendUnavailable(self._init_problem(exc)) from exc
        self.hostname = hostname
        self._warned: set[tuple[int, str, int]] = set()
        driver = self._system(pynvml.nvmlSystemGetDriverVersion)
        cuda = self._system(pynvml.nvmlSystemGetCudaDriverVersion)
        self.driver_version: str | None = _text(driver) if driver is not None else None
        self.cuda_version: str | None = _cuda_version(cuda) if cuda is not None else None

    def _init_problem(self, exc: Exception) -> str:
        code = getattr(exc, "value", None)
        if code == self._nv.NVML_ERROR_LIBRARY_NOT_FOUND:
            problem = (
                "the NVML library (libnvidia-ml.so.1) was not found "
                "(is the NVIDIA driver installed?)"
            )
        elif code == self._nv.NVML_ERROR_DRIVER_NOT_LOADED:
            problem = "the NVIDIA kernel driver is not loaded"
        else:
            problem = f"NVML failed to initialise: {exc}"
        return f"{problem}; {SIM_HINT}"

    def _system(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self._nv.NVMLError as exc:
            log.warning("NVML %s failed: %s", fn.__name__, exc)
            return None

    def _get(self, index: int, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call; an unreadable field becomes None, a lost GPU aborts the card."""
        nv = self._nv
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost from exc
            # NotSupported is a permanent property of the card, not worth a log line;
            # anything else is logged once so a flapping field does not flood the log.
            key = (index, field, exc.value)
            if exc.value != nv.NVML_ERROR_NOT_SUPPORTED and key not in self._warned:
                self._warned.add(key)
                log.warning("GPU %d: cannot read %s: %s", index, field, exc)
            return None

    def collect(self) -> NodeSnapshot:
        now = time.time()
        count = self._nv.nvmlDeviceGetCount()
        return NodeSnapshot(
            hostname=self.hostname,
            collected_at=now,
            gpus=[self._read_gpu(i) for i in range(count)],
            driver_version=self.driver_version,
            cuda_version=self.cuda_version,
        )

    def _read_gpu(self, index: int) -> GpuReading:
        nv = self._nv
        reading = GpuReading(index=index)
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_GPU_IS_LOST:
                reading.health = "lost"
            else:
                log.warning("GPU %d: no NVML handle: %s", index, exc)
            return reading
        try:
            reading.name = self._get(index, "name", nv.nvmlDeviceGetName, handle)
            reading.uuid = self._get(index, "uuid", nv.nvmlDeviceGetUUID, handle)
            reading.serial = self._get(index, "serial", nv.nvmlDeviceGetSerial, handle)
            pci = self._get(index, "pci_bus_id", nv.nvmlDeviceGetPciInfo, handle)
            if pci is not None:
                reading.pci_bus_id = _text(pci.busId)
            measurements = self._measure(index, handle)
        except _GpuLost:
            # Whatever identity was read before the loss stays, so the portal can say which card.
            reading.health = "lost"
            return reading
        for key, value in measurements.items():
            setattr(reading, key, value)
        return reading

    def _measure(self, index: int, handle: Any) -> dict[str, Any]:
        nv = self._nv
        out: dict[str, Any] = {}
        mem = self._get(index, "memory", nv.nvmlDeviceGetMemoryInfo, handle)
        if mem is not None:
            out["memory_total_mib"] = mem.total // _MIB
            out["memory_used_mib"] = mem.used // _MIB
            out["memory_free_mib"] = mem.free // _MIB
        util = self._get(index, "utilization", nv.nvmlDeviceGetUtilizationRates, handle)
        if util is not None:
            out["utilization_gpu_pct"] = util.gpu
            out["utilization_memory_pct"] = util.memory
        out["temperature_c"] = self._get(
            index, "temperature", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU
        )
        power_mw = self._get(index, "power", nv.nvmlDeviceGetPowerUsage, handle)
        if power_mw is not None:
            out["power_w"] = power_mw / 1000
        limit_mw = self._get(index, "power_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle)
        if limit_mw is not None:
            out["power_limit_w"] = limit_mw / 1000
        out["sm_clock_mhz"] = self._get(
            index, "sm_clock", nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM
        )
        out["mem_clock_mhz"] = self._get(
            index, "mem_clock", nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM
        )
        out["energy_mj"] = self._get(
            index, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, handle
        )
        return out

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError as exc:
            log.debug("nvmlShutdown failed: %s", exc)
