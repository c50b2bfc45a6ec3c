"""A fake NVIDIA driver: pynvml's real module with its entry points answered from data.

Errors are pynvml's own classes (``pynvml.NVMLError(code)`` builds the matching
subclass), so the backend meets exactly what the library raises. Each patched
name is checked to exist in pynvml, which keeps the fake honest about its API.
Used by the NVML tests and by ``bench/agent`` for the NVML code path.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1024 * 1024


@dataclass
class FakeMig:
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    name: str
    total_mib: int
    used_mib: int


@dataclass
class FakeProcess:
    pid: int
    used_mib: int | None
    gpu_instance_id: int = 0xFFFFFFFF
    compute_instance_id: int = 0xFFFFFFFF


@dataclass
class FakeCard:
    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = "GPU-5f0b1c2d-0000-1111-2222-333344445555"
    serial: str = "1321021034567"
    bus_id: bytes = b"00000000:07:00.0"
    # field -> NVML error code to raise instead of answering
    failures: dict[str, int] = field(default_factory=dict)
    processes: list[FakeProcess] = field(default_factory=list)
    mig: list[FakeMig | None] | None = None  # None: MIG disabled; None slots are empty
    # GPM metric id -> percent (a float) the counters show over the interval, or an NVML
    # error code (an int) returned for that metric inside the struct. None: no GPM
    # (pre-Hopper, as an A100). A metric missing from the dict answers NotSupported.
    gpm: dict[int, float | int] | None = None


HOPPER_GPM: dict[int, float | int] = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 87.5,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 41.25,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 63.0,
}


@dataclass
class FakeGpmSample:
    """What the driver keeps behind a sample handle: whose counters, and when taken."""

    card: int | None = None
    taken: int = 0  # the driver's sequence number, so the order of two samples is known
    values: dict[int, float | int] = field(default_factory=dict)


@dataclass
class FakeDriver:
    cards: list[FakeCard]
    calls: list[str] = field(default_factory=list)
    # (card index, xid) pairs waiting in the event set
    events: list[tuple[int, int]] = field(default_factory=list)
    registered: set[int] = field(default_factory=set)
    # sample address -> sample; freed addresses leave
    gpm_samples: dict[int, FakeGpmSample] = field(default_factory=dict)
    gpm_freed: list[int] = field(default_factory=list)


def _field_values(card: FakeCard, ids: list[int]) -> list[Any]:
    if ids != [pynvml.NVML_FI_DEV_MEMORY_TEMP]:
        raise AssertionError(f"unexpected field ids {ids}")
    status = card.failures.get("memory_temp_field", pynvml.NVML_SUCCESS)
    return [SimpleNamespace(nvmlReturn=status, valueType=1, value=SimpleNamespace(uiVal=52))]


def install_fake_nvml(
    setattr_: Callable[[Any, str, Any], None], cards: list[FakeCard]
) -> FakeDriver:
    """Patch pynvml through ``setattr_`` (monkeypatch.setattr, or setattr in the benchmark)."""
    driver = FakeDriver(cards)
    calls = driver.calls

    def answer(fieldname: str, value: Any) -> Any:
        def fn(handle: Any, *args: Any) -> Any:
            calls.append(fieldname)
            if isinstance(handle, FakeMig):
                return value(handle, *args) if callable(value) else value
            code = cards[handle].failures.get(fieldname)
            if code is not None:
                raise pynvml.NVMLError(code)
            return value(cards[handle], *args) if callable(value) else value

        return fn

    def clock(card: FakeCard, kind: int) -> int:
        return {pynvml.NVML_CLOCK_SM: 1410, pynvml.NVML_CLOCK_MEM: 1593}[kind]

    def memory(card: FakeCard | FakeMig, version: int | None = None) -> Any:
        if isinstance(card, FakeMig):
            free = card.total_mib - card.used_mib
            return SimpleNamespace(
                total=card.total_mib * MIB, used=card.used_mib * MIB, free=free * MIB
            )
        # As a real driver does: v2's "used" leaves the reserve out, v1's includes it.
        if version is not None:
            if "memory_v2" in card.failures:
                raise pynvml.NVMLError(card.failures["memory_v2"])
            return SimpleNamespace(
                total=81920 * MIB, used=1234 * MIB, free=80126 * MIB, reserved=560 * MIB
            )
        return SimpleNamespace(total=81920 * MIB, used=1794 * MIB, free=80126 * MIB)

    def handle(index: int) -> int:
        if "handle" in cards[index].failures:
            raise pynvml.NVMLError(cards[index].failures["handle"])
        return index

    def mig_handle(index: int, slot: int) -> FakeMig:
        mig = cards[index].mig or []
        if slot >= len(mig) or mig[slot] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return mig[slot]  # type: ignore[return-value]

    def register(index: int, types: int, event_set: Any) -> None:
        assert event_set == "event-set"
        assert types == pynvml.nvmlEventTypeXidCriticalError
        driver.registered.add(index)

    def wait(event_set: Any, timeout_ms: int) -> Any:
        assert timeout_ms == 0, "the collector must never block on events"
        if not driver.events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        index, xid = driver.events.pop(0)
        return SimpleNamespace(
            device=index, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid
        )

    def processes(card: FakeCard) -> list[Any]:
        return [
            SimpleNamespace(
                pid=p.pid,
                usedGpuMemory=None if p.used_mib is None else p.used_mib * MIB,
                gpuInstanceId=p.gpu_instance_id,
                computeInstanceId=p.compute_instance_id,
            )
            for p in card.processes
        ]

    gpm_sequence = iter(range(1, 1 << 30))

    def address(sample: Any) -> int:
        value = ctypes.cast(sample, ctypes.c_void_p).value
        assert value in driver.gpm_samples, f"unknown or freed GPM sample {value}"
        return value

    def gpm_support(card: FakeCard) -> Any:
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(card.gpm is not None)
        return support

    def gpm_alloc() -> Any:
        calls.append("gpm_alloc")
        # A real pointer type holding a made-up address, as pynvml's own handle.
        key = 0x1000 + 16 * (len(driver.gpm_samples) + len(driver.gpm_freed))
        driver.gpm_samples[key] = FakeGpmSample()
        return ctypes.cast(key, pynvml.c_nvmlGpmSample_t)

    def gpm_free(sample: Any) -> None:
        key = address(sample)
        del driver.gpm_samples[key]
        driver.gpm_freed.append(key)

    def gpm_sample(card: FakeCard, sample: Any) -> Any:
        assert card.gpm is not None, "GPM sampled on a card that said it has none"
        index = next(i for i, c in enumerate(cards) if c is card)  # dataclass == is by value
        driver.gpm_samples[address(sample)] = FakeGpmSample(
            index, next(gpm_sequence), dict(card.gpm)
        )
        return sample

    def gpm_metrics(request: Any) -> Any:
        calls.append("gpm_metrics")
        assert isinstance(request, pynvml.c_nvmlGpmMetricsGet_t)
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        older = driver.gpm_samples[address(request.sample1)]
        newer = driver.gpm_samples[address(request.sample2)]
        assert older.card == newer.card is not None, "samples from two cards"
        assert 0 < older.taken < newer.taken, "sample1 must be the older sample"
        card = cards[newer.card]  # type: ignore[index]
        if "gpm_metrics" in card.failures:
            raise pynvml.NVMLError(card.failures["gpm_metrics"])
        for slot in range(request.numMetrics):
            metric = request.metrics[slot]
            value = newer.values.get(metric.metricId, pynvml.NVML_ERROR_NOT_SUPPORTED)
            if isinstance(value, int):
                metric.nvmlReturn, metric.value = value, 0.0
            else:
                metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, value
        return request

    patches: dict[str, Any] = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetCudaDriverVersion": lambda: 12040,
        "nvmlDeviceGetCount": lambda: len(cards),
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetIndex": lambda h: h,
        "nvmlDeviceGetName": answer("name", lambda c: c.name),
        "nvmlDeviceGetUUID": answer("uuid", lambda c: c.uuid),
        "nvmlDeviceGetSerial": answer("serial", lambda c: c.serial),
        "nvmlDeviceGetPciInfo": answer("pci", lambda c: SimpleNamespace(busId=c.bus_id)),
        "nvmlDeviceGetMemoryInfo": answer("memory", memory),
        "nvmlDeviceGetUtilizationRates": answer("utilization", SimpleNamespace(gpu=37, memory=12)),
        "nvmlDeviceGetTemperature": answer("temperature", 45),
        "nvmlDeviceGetPowerUsage": answer("power", 123_456),
        "nvmlDeviceGetEnforcedPowerLimit": answer("power_limit", 400_000),
        "nvmlDeviceGetClockInfo": answer("clock", clock),
        "nvmlDeviceGetTotalEnergyConsumption": answer("energy", 123_456_789),
        "nvmlDeviceGetFieldValues": answer("memory_temp", _field_values),
        "nvmlDeviceGetFanSpeed": answer("fan", 41),
        "nvmlDeviceGetEncoderUtilization": answer("encoder", [3, 167000]),
        "nvmlDeviceGetDecoderUtilization": answer("decoder", [0, 167000]),
        "nvmlDeviceGetPcieThroughput": answer(
            "pcie", lambda c, k: {pynvml.NVML_PCIE_UTIL_TX_BYTES: 2000}.get(k, 500)
        ),
        "nvmlDeviceGetPcieReplayCounter": answer("pcie_replay", 2),
        "nvmlDeviceGetTotalEccErrors": answer(
            "ecc", lambda c, kind, counter: 7 if kind == 0 else 1
        ),
        "nvmlDeviceGetRemappedRows": answer("remapped_rows", (3, 0, 0, 0)),
        "nvmlDeviceGetMigMode": answer("mig_mode", lambda c: [int(c.mig is not None), 0]),
        "nvmlDeviceGetMaxMigDeviceCount": answer("mig_count", lambda c: len(c.mig or [])),
        "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        "nvmlDeviceGetGpuInstanceId": answer("mig_gi", lambda m: m.gpu_instance_id),
        "nvmlDeviceGetComputeInstanceId": answer("mig_ci", lambda m: m.compute_instance_id),
        "nvmlDeviceGetComputeRunningProcesses": answer("processes", processes),
        "nvmlEventSetCreate": lambda: "event-set",
        "nvmlEventSetFree": lambda s: calls.append("event_set_free"),
        "nvmlDeviceGetSupportedEventTypes": answer(
            "event_types", pynvml.nvmlEventTypeXidCriticalError
        ),
        "nvmlDeviceRegisterEvents": register,
        "nvmlEventSetWait_v2": wait,
        "nvmlGpmQueryDeviceSupport": answer("gpm_support", gpm_support),
        "nvmlGpmSampleAlloc": gpm_alloc,
        "nvmlGpmSampleFree": gpm_free,
        "nvmlGpmSampleGet": answer("gpm_sample", gpm_sample),
        "nvmlGpmMetricsGet": gpm_metrics,
    }
    for name, fn in patches.items():
        assert hasattr(pynvml, name), name
        setattr_(pynvml, name, fn)
    return driver
