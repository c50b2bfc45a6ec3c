"""NVML backend against a fake driver: pynvml's real module with its calls patched.

Errors are pynvml's own classes (``pynvml.NVMLError(code)`` builds the matching
subclass), so the backend is tested against exactly what the library raises.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from agents.gpu_agent.backends.base import Backend, BackendUnavailable
from agents.gpu_agent.backends.nvml import NvmlBackend

MIB = 1024 * 1024


@dataclass
class FakeCard:
    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = "GPU-5f0b1c2d-0000-1111-2222-333344445555"
    serial: str = "1321021034567"
    bus_id: bytes = b"00000000:07:00.0"
    # field -> NVML error code to raise instead of answering
    failures: dict[str, int] = field(default_factory=dict)


def install_fake_nvml(monkeypatch: pytest.MonkeyPatch, cards: list[FakeCard]) -> list[str]:
    """Patch pynvml's entry points to answer from ``cards``; returns the calls made."""
    calls: list[str] = []

    def answer(fieldname: str, value: Any) -> Any:
        def fn(handle: int, *args: Any) -> Any:
            calls.append(fieldname)
            code = cards[handle].failures.get(fieldname)
            if code is not None:
                raise pynvml.NVMLError(code)
            return value(cards[handle], *args) if callable(value) else value

        return fn

    def clock(card: FakeCard, kind: int) -> int:
        return {pynvml.NVML_CLOCK_SM: 1410, pynvml.NVML_CLOCK_MEM: 1593}[kind]

    def handle(index: int) -> int:
        if "handle" in cards[index].failures:
            raise pynvml.NVMLError(cards[index].failures["handle"])
        return index

    patches: dict[str, Any] = {
        "nvmlInit": lambda: calls.append("init"),
        "nvmlShutdown": lambda: calls.append("shutdown"),
        "nvmlSystemGetDriverVersion": lambda: "550.54.15",
        "nvmlSystemGetCudaDriverVersion": lambda: 12040,
        "nvmlDeviceGetCount": lambda: len(cards),
        "nvmlDeviceGetHandleByIndex": handle,
        "nvmlDeviceGetName": answer("name", lambda c: c.name),
        "nvmlDeviceGetUUID": answer("uuid", lambda c: c.uuid),
        "nvmlDeviceGetSerial": answer("serial", lambda c: c.serial),
        "nvmlDeviceGetPciInfo": answer("pci", lambda c: SimpleNamespace(busId=c.bus_id)),
        "nvmlDeviceGetMemoryInfo": answer(
            "memory", SimpleNamespace(total=81920 * MIB, used=1234 * MIB, free=80686 * MIB)
        ),
        "nvmlDeviceGetUtilizationRates": answer("utilization", SimpleNamespace(gpu=37, memory=12)),
        "nvmlDeviceGetTemperature": answer("temperature", 45),
        "nvmlDeviceGetPowerUsage": answer("power", 123_456),
        "nvmlDeviceGetEnforcedPowerLimit": answer("power_limit", 400_000),
        "nvmlDeviceGetClockInfo": answer("clock", clock),
        "nvmlDeviceGetTotalEnergyConsumption": answer("energy", 123_456_789),
    }
    for name, fn in patches.items():
        assert hasattr(pynvml, name), name  # keep the fake honest about pynvml's API
        monkeypatch.setattr(pynvml, name, fn)
    return calls


def test_a_normal_card_is_read_in_the_documented_units(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_nvml(monkeypatch, [FakeCard()])
    backend = NvmlBackend("gpu-node-1")
    assert isinstance(backend, Backend)
    snapshot = backend.collect()
    assert snapshot.hostname == "gpu-node-1"
    assert snapshot.driver_version == "550.54.15"
    assert snapshot.cuda_version == "12.4"
    assert snapshot.to_dict()["gpus"] == [
        {
            "index": 0,
            "uuid": "GPU-5f0b1c2d-0000-1111-2222-333344445555",
            "name": "NVIDIA A100-SXM4-80GB",
            "pci_bus_id": "00000000:07:00.0",
            "serial": "1321021034567",
            "memory_total_mib": 81920,
            "memory_used_mib": 1234,
            "memory_free_mib": 80686,
            "utilization_gpu_pct": 37,
            "utilization_memory_pct": 12,
            "temperature_c": 45,
            "power_w": 123.456,
            "power_limit_w": 400.0,
            "sm_clock_mhz": 1410,
            "mem_clock_mhz": 1593,
            "energy_mj": 123456789,
            "health": "ok",
        }
    ]


def test_unsupported_power_reading_is_absent_and_the_rest_present(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    card = FakeCard(failures={"power": pynvml.NVML_ERROR_NOT_SUPPORTED})
    install_fake_nvml(monkeypatch, [card])
    gpu = NvmlBackend("n").collect().to_dict()["gpus"][0]
    assert "power_w" not in gpu
    assert gpu["power_limit_w"] == 400.0
    assert gpu["temperature_c"] == 45
    assert gpu["health"] == "ok"
    assert "power" not in caplog.text  # NotSupported is a fact about the card, not news


def test_other_field_errors_are_absent_and_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    card = FakeCard(failures={"energy": pynvml.NVML_ERROR_NO_PERMISSION})
    install_fake_nvml(monkeypatch, [card])
    backend = NvmlBackend("n")
    for _ in range(3):
        gpu = backend.collect().to_dict()["gpus"][0]
        assert "energy_mj" not in gpu
        assert gpu["power_w"] == 123.456
    assert caplog.text.count("cannot read energy") == 1


def test_a_lost_gpu_is_reported_lost_with_only_its_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lost = FakeCard(uuid="GPU-lost", failures={"utilization": pynvml.NVML_ERROR_GPU_IS_LOST})
    install_fake_nvml(monkeypatch, [FakeCard(), lost])
    ok_gpu, lost_gpu = NvmlBackend("n").collect().to_dict()["gpus"]
    assert ok_gpu["health"] == "ok"
    assert lost_gpu == {
        "index": 1,
        "uuid": "GPU-lost",
        "name": "NVIDIA A100-SXM4-80GB",
        "pci_bus_id": "00000000:07:00.0",
        "serial": "1321021034567",
        "health": "lost",
    }


def test_a_gpu_lost_before_its_handle_keeps_its_index(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_nvml(monkeypatch, [FakeCard(failures={"handle": pynvml.NVML_ERROR_GPU_IS_LOST})])
    assert NvmlBackend("n").collect().to_dict()["gpus"] == [{"index": 0, "health": "lost"}]


def test_missing_library_raises_backend_unavailable_with_the_sim_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_library() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    with pytest.raises(BackendUnavailable, match="--backend sim") as excinfo:
        NvmlBackend("n")
    assert "libnvidia-ml" in str(excinfo.value)
    assert isinstance(excinfo.value.__cause__, pynvml.NVMLError_LibraryNotFound)


def test_unloaded_driver_raises_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    with pytest.raises(BackendUnavailable, match=r"driver is not loaded.*--backend sim"):
        NvmlBackend("n")


def test_missing_pynvml_module_raises_backend_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(BackendUnavailable, match=r"nvidia-ml-py.*--backend sim"):
        NvmlBackend("n")


def test_close_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = install_fake_nvml(monkeypatch, [])
    backend = NvmlBackend("empty")
    assert backend.collect().gpus == []
    backend.close()
    assert calls == ["init", "shutdown"]
