"""Real NVIDIA GPUs through NVML (the ``pynvml`` module from nvidia-ml-py).

pynvml is imported inside the constructor so the simulator and the tests run on
machines that have neither the module nor a driver. Every field is read on its
own: cards differ in what they support (no energy counter on older boards, no
fan on passively cooled ones, no ECC on consumer cards), and one unsupported call
must not hide the rest. ``NVMLError_GpuIsLost`` from any call abandons that card
for this collection and reports it lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from agents.gpu_agent import limits
from agents.gpu_agent.backends.base import BackendUnavailable
from agents.gpu_agent.backends.nvml_gpm import GpmReader
from agents.gpu_agent.backends.nvml_reads import (
    GpuLost,
    read_extended,
    read_mig_devices,
    read_processes,
)
from agents.gpu_agent.backends.nvml_xid import XidWatcher
from agents.gpu_agent.backends.procinfo import ProcessInspector
from agents.gpu_agent.model import GpuReading, NodeSnapshot

log = logging.getLogger(__name__)

SIM_HINT = "use --backend sim to run without a GPU"
_MIB = 1024 * 1024
_IDENTITY = ("name", "uuid", "serial", "pci_bus_id")


def _text(value: str | bytes) -> str:
    # Struct fields (PCI bus id) come back as bytes; the function wrappers already decode.
    return value.decode() if isinstance(value, bytes) else value


def _cuda_version(raw: int) -> str:
    # NVML encodes CUDA 12.4 as 12040.
    return f"{raw // 1000}.{raw % 1000 // 10}"


# Fields re-read only this often (seconds), by the name _get logs them under.
SLOW_FIELDS_S = {
    "energy": 10.0,
    "pcie_tx_bytes_per_s": 10.0,
    "pcie_rx_bytes_per_s": 10.0,
    "pcie_replay": 30.0,
    "ecc_corrected_total": 30.0,
    "ecc_uncorrected_total": 30.0,
    "remapped_rows": 60.0,
}


class NvmlBackend:
    name = "nvml"

    def __init__(
        self,
        hostname: str,
        inspector: ProcessInspector | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
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
        self._clock = clock
        self._paced: dict[tuple[int, str], tuple[float, Any]] = {}
        # Identity never changes while the driver is loaded: read it once per card, and
        # still know which card it was when it is lost.
        self._identity: dict[int, dict[str, str | None]] = {}
        self._inspector = inspector or ProcessInspector()
        driver = self._system(pynvml.nvmlSystemGetDriverVersion)
        cuda = self._system(pynvml.nvmlSystemGetCudaDriverVersion)
        self.driver_version: str | None = _text(driver) if driver is not None else None
        self._inspector.driver_caps = limits.driver_enforces(self.driver_version)
        self.cuda_version: str | None = _cuda_version(cuda) if cuda is not None else None
        self._xids = XidWatcher(pynvml)
        self._gpm = GpmReader(pynvml)

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

    def _get_paced(self, index: int, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Like ``_get``, but a costly, slow-moving field is re-read only every few seconds.

        Measured on an H200 (driver 580): the energy counter costs 4 ms of CPU per read
        and each PCIe throughput read 0.8 ms (and 21 ms of wall time), more than all the
        other fields together; they change slowly or are themselves short samples.
        """
        period = SLOW_FIELDS_S.get(field)
        if period is None:
            return self._get(index, field, fn, *args)
        now = self._clock()
        cached = self._paced.get((index, field))
        if cached is not None and now - cached[0] < period:
            return cached[1]
        value = self._get(index, field, fn, *args)
        self._paced[(index, field)] = (now, value)
        return value

    def _get(self, index: int, field: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call; an unreadable field becomes None, a lost GPU aborts the card."""
        nv = self._nv
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            if exc.value == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost from exc
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
        handles = [self._handle(i) for i in range(count)]
        # Events first and without waiting: the XIDs since the last pass belong to this one.
        self._xids.poll(handles, now)
        gpus = [self._read_gpu(i, handle) for i, handle in enumerate(handles)]
        self._inspector.retain({p.pid for g in gpus for p in g.processes or ()})
        return NodeSnapshot(
            hostname=self.hostname,
            collected_at=now,
            gpus=gpus,
            driver_version=self.driver_version,
            cuda_version=self.cuda_version,
        )

    def _handle(self, index: int) -> Any:
        nv = self._nv
        try:
            return nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            if exc.value != nv.NVML_ERROR_GPU_IS_LOST:
                log.warning("GPU %d: no NVML handle: %s", index, exc)
            return None

    def _read_gpu(self, index: int, handle: Any) -> GpuReading:
        reading = GpuReading(index=index, **self._identity.get(index, {}))
        if handle is None or self._xids.fatal(index):
            self._gpm.forget(index)
            reading.health = "lost"
            return reading
        try:
            if index not in self._identity:
                self._identity[index] = self._read_identity(index, handle)
                for key, value in self._identity[index].items():
                    setattr(reading, key, value)
            measurements = self._measure(index, handle)
            measurements.update(read_extended(self._nv, self._get_paced, index, handle))
            measurements.update(self._gpm.read(index, handle, self._get))
            measurements["mig_devices"] = None
            if measurements.get("mig_mode") == "enabled":
                measurements["mig_devices"] = read_mig_devices(self._nv, self._get, index, handle)
            measurements["processes"] = read_processes(
                self._nv, self._get, index, handle, self._inspector
            )
        except GpuLost:
            # Whatever identity was read before the loss stays, so the portal can say which card.
            self._gpm.forget(index)
            reading.health = "lost"
            return reading
        for key, value in measurements.items():
            setattr(reading, key, value)
        if self._xids.registered(index):
            reading.xid_last = self._xids.tally.last(index)
            reading.xid_errors = self._xids.tally.counts(index)
        return reading

    def _read_identity(self, index: int, handle: Any) -> dict[str, str | None]:
        nv = self._nv
        identity: dict[str, str | None] = {
            "name": self._get(index, "name", nv.nvmlDeviceGetName, handle),
            "uuid": self._get(index, "uuid", nv.nvmlDeviceGetUUID, handle),
            "serial": self._get(index, "serial", nv.nvmlDeviceGetSerial, handle),
            "pci_bus_id": None,
        }
        pci = self._get(index, "pci_bus_id", nv.nvmlDeviceGetPciInfo, handle)
        if pci is not None:
            identity["pci_bus_id"] = _text(pci.busId)
        return identity

    def _measure(self, index: int, handle: Any) -> dict[str, Any]:
        nv = self._nv
        out: dict[str, Any] = {}
        # The v2 structure's "used" leaves out what the driver reserves, as nvidia-smi
        # does (on an idle H200: 0 MiB used, 615 MiB reserved; v1 says 615 used).
        mem = self._get(index, "memory_v2", nv.nvmlDeviceGetMemoryInfo, handle, nv.nvmlMemory_v2)
        if mem is not None:
            out["memory_reserved_mib"] = mem.reserved // _MIB
        else:  # drivers before R510 know only v1, whose "used" includes the reserve
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
        out["energy_mj"] = self._get_paced(
            index, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, handle
        )
        return out

    def close(self) -> None:
        self._xids.close()
        self._gpm.close()
        try:
            self._nv.nvmlShutdown()
        except self._nv.NVMLError as exc:
            log.debug("nvmlShutdown failed: %s", exc)
