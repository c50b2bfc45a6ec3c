"""NVML backend against a fake driver: pynvml's real module with its calls patched.

Errors are pynvml's own classes (``pynvml.NVMLError(code)`` builds the matching
subclass), so the backend is tested against exactly what the library raises.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pynvml
import pytest

from agents.gpu_agent.backends.base import Backend, BackendUnavailable
from agents.gpu_agent.backends.nvml import NvmlBackend
from agents.gpu_agent.backends.procinfo import ProcessInspector
from tests.agent.fake_nvml import FakeCard, FakeMig, FakeProcess
from tests.agent.fake_nvml import install_fake_nvml as install


def install_fake_nvml(monkeypatch: pytest.MonkeyPatch, cards: list[FakeCard]) -> list[str]:
    return install(monkeypatch.setattr, cards).calls


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
            "memory_free_mib": 80126,
            "utilization_gpu_pct": 37,
            "utilization_memory_pct": 12,
            "temperature_c": 45,
            "power_w": 123.456,
            "power_limit_w": 400.0,
            "sm_clock_mhz": 1410,
            "mem_clock_mhz": 1593,
            "energy_mj": 123456789,
            "health": "ok",
            "memory_reserved_mib": 560,
            "memory_temperature_c": 52,
            "fan_speed_pct": 41,
            "encoder_utilization_pct": 3,
            "decoder_utilization_pct": 0,
            "pcie_tx_bytes_per_s": 2000 * 1024,
            "pcie_rx_bytes_per_s": 500 * 1024,
            "pcie_replay_total": 2,
            "ecc_corrected_total": 7,
            "ecc_uncorrected_total": 1,
            "remapped_rows_correctable": 3,
            "remapped_rows_uncorrectable": 0,
            "row_remap_failure": False,
            "xid_last": 0,
            "xid_errors": [],
            "mig_mode": "disabled",
            "processes": [],
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
    assert calls == ["init", "event_set_free", "shutdown"]


# Each extended field's fake name, and the snapshot keys it feeds.
EXTENDED_FIELDS = {
    "memory_v2": ["memory_reserved_mib"],
    "memory_temp": ["memory_temperature_c"],
    "fan": ["fan_speed_pct"],
    "encoder": ["encoder_utilization_pct"],
    "decoder": ["decoder_utilization_pct"],
    "pcie": ["pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"],
    "pcie_replay": ["pcie_replay_total"],
    "ecc": ["ecc_corrected_total", "ecc_uncorrected_total"],
    "remapped_rows": [
        "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_failure",
    ],
    "mig_mode": ["mig_mode"],
    "processes": ["processes"],
    "temperature": ["temperature_c"],
    "clock": ["sm_clock_mhz", "mem_clock_mhz"],
    "utilization": ["utilization_gpu_pct", "utilization_memory_pct"],
}  # fmt: skip


@pytest.mark.parametrize("fieldname", sorted(EXTENDED_FIELDS))
def test_each_field_a_card_does_not_support_is_absent_and_the_rest_present(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fieldname: str
) -> None:
    install_fake_nvml(monkeypatch, [FakeCard()])
    full = NvmlBackend("n").collect().to_dict()["gpus"][0]
    card = FakeCard(failures={fieldname: pynvml.NVML_ERROR_NOT_SUPPORTED})
    install_fake_nvml(monkeypatch, [card])
    gpu = NvmlBackend("n").collect().to_dict()["gpus"][0]
    missing = EXTENDED_FIELDS[fieldname]
    assert {key for key in full if key not in gpu} == set(missing)
    assert gpu["health"] == "ok"
    assert "cannot read" not in caplog.text


def test_a_memory_temperature_field_error_inside_the_struct_leaves_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    card = FakeCard(failures={"memory_temp_field": pynvml.NVML_ERROR_NOT_SUPPORTED})
    install_fake_nvml(monkeypatch, [card])
    gpu = NvmlBackend("n").collect().to_dict()["gpus"][0]
    assert "memory_temperature_c" not in gpu
    assert gpu["temperature_c"] == 45


def test_a_gpu_lost_mid_run_keeps_its_identity_and_the_other_cards_go_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    second = FakeCard(uuid="GPU-second", bus_id=b"00000000:0F:00.0")
    install_fake_nvml(monkeypatch, [FakeCard(), second])
    backend = NvmlBackend("n")
    assert [g["health"] for g in backend.collect().to_dict()["gpus"]] == ["ok", "ok"]
    # The card falls off the bus: even its handle is gone now.
    second.failures["handle"] = pynvml.NVML_ERROR_GPU_IS_LOST
    ok_gpu, lost_gpu = backend.collect().to_dict()["gpus"]
    assert ok_gpu["utilization_gpu_pct"] == 37
    assert lost_gpu == {
        "index": 1,
        "uuid": "GPU-second",
        "name": "NVIDIA A100-SXM4-80GB",
        "pci_bus_id": "00000000:0F:00.0",
        "serial": "1321021034567",
        "health": "lost",
    }


def test_a_gpu_lost_inside_a_field_value_struct_is_reported_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    card = FakeCard(failures={"memory_temp_field": pynvml.NVML_ERROR_GPU_IS_LOST})
    install_fake_nvml(monkeypatch, [card])
    gpu = NvmlBackend("n").collect().to_dict()["gpus"][0]
    assert gpu["health"] == "lost"
    assert "utilization_gpu_pct" not in gpu


def test_xid_events_are_counted_per_code_with_repeats_and_never_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = install(monkeypatch.setattr, [FakeCard(), FakeCard(uuid="GPU-b")])
    backend = NvmlBackend("n")
    first = backend.collect().to_dict()["gpus"]
    assert [g["xid_last"] for g in first] == [0, 0]
    assert driver.registered == {0, 1}
    driver.events += [(1, 13), (1, 31), (1, 13)]
    gpu0, gpu1 = backend.collect().to_dict()["gpus"]
    assert gpu0["xid_errors"] == []
    assert gpu1["xid_last"] == 13
    assert [(e["xid"], e["count"]) for e in gpu1["xid_errors"]] == [(13, 2), (31, 1)]
    assert gpu1["health"] == "ok"
    # Counts stay when no new event arrives: a counter, not a last-value gauge.
    again = backend.collect().to_dict()["gpus"][1]
    assert [(e["xid"], e["count"]) for e in again["xid_errors"]] == [(13, 2), (31, 1)]


def test_xid_79_marks_the_card_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = install(monkeypatch.setattr, [FakeCard()])
    backend = NvmlBackend("n")
    backend.collect()
    driver.events.append((0, 79))
    gpu = backend.collect().to_dict()["gpus"][0]
    assert gpu["health"] == "lost"
    assert gpu["uuid"] == FakeCard().uuid


def test_a_card_without_xid_events_reports_no_xid_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    install_fake_nvml(monkeypatch, [FakeCard(failures={"event_types": 3})])
    gpu = NvmlBackend("n").collect().to_dict()["gpus"][0]
    assert "xid_last" not in gpu
    assert "xid_errors" not in gpu


def test_mig_devices_are_listed_with_their_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    migs: list[FakeMig | None] = [
        FakeMig("MIG-aaaa", 1, 0, "NVIDIA A100-SXM4-80GB MIG 3g.40gb", 40192, 1000),
        None,  # an empty slot between instances
        FakeMig("MIG-bbbb", 2, 0, "NVIDIA A100-SXM4-80GB MIG 1g.10gb", 9728, 0),
    ]
    install_fake_nvml(monkeypatch, [FakeCard(mig=migs)])
    gpu = NvmlBackend("n").collect().to_dict()["gpus"][0]
    assert gpu["mig_mode"] == "enabled"
    assert gpu["mig_devices"] == [
        {"index": 0, "uuid": "MIG-aaaa", "gpu_instance_id": 1, "compute_instance_id": 0,
         "profile": "3g.40gb", "memory_total_mib": 40192, "memory_used_mib": 1000,
         "memory_free_mib": 39192},
        {"index": 2, "uuid": "MIG-bbbb", "gpu_instance_id": 2, "compute_instance_id": 0,
         "profile": "1g.10gb", "memory_total_mib": 9728, "memory_used_mib": 0,
         "memory_free_mib": 9728},
    ]  # fmt: skip


def fake_proc(root: Path, pid: int, cmdline: bytes, environ: bytes) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "cmdline").write_bytes(cmdline)
    (root / str(pid) / "environ").write_bytes(environ)


def test_processes_carry_owner_command_and_allocation_read_once_per_pid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_proc(
        tmp_path, 4242, b"python\0train.py\0--lr\x000.1\0", b"A=1\0GPU_PORTAL_ALLOCATION=a-17\0"
    )
    fake_proc(tmp_path, 4343, b"jupyter\0", b"HOME=/root\0")
    card = FakeCard(processes=[FakeProcess(4242, 20000), FakeProcess(4343, None)])
    install_fake_nvml(monkeypatch, [card])
    inspector = ProcessInspector(proc_root=tmp_path)
    backend = NvmlBackend("n", inspector=inspector)
    user = os.environ.get("USER") or __import__("pwd").getpwuid(os.getuid()).pw_name
    for _ in range(3):
        processes = backend.collect().gpus[0].processes
        assert processes is not None
        train, notebook = processes
        assert train.to_dict() == {
            "pid": 4242, "memory_used_mib": 20000, "user": user, "uid": os.getuid(),
            "command": "python train.py --lr 0.1",
        }  # fmt: skip
        assert train.allocation_env == "a-17"
        assert "memory_used_mib" not in notebook.to_dict()  # the driver could not tell
        assert notebook.allocation_env is None
    assert inspector.reads == 2
    # A process that leaves is forgotten, so a reused PID is read afresh.
    card.processes = [FakeProcess(4343, 10)]
    backend.collect()
    card.processes = [FakeProcess(4242, 10)]
    backend.collect()
    assert inspector.reads == 3


def test_a_process_that_vanished_before_its_proc_read_is_still_listed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install_fake_nvml(monkeypatch, [FakeCard(processes=[FakeProcess(99999, 5)])])
    processes = NvmlBackend("n", ProcessInspector(proc_root=tmp_path)).collect().gpus[0].processes
    assert processes is not None
    assert [p.to_dict() for p in processes] == [{"pid": 99999, "memory_used_mib": 5}]


def test_a_real_process_environment_names_its_allocation(tmp_path: Path) -> None:
    import subprocess

    env = {**os.environ, "GPU_PORTAL_ALLOCATION": "alloc-9"}
    code = "import time; print('ready', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        child.stdout.readline()  # past exec: /proc shows the new program, not the fork
        info = ProcessInspector().info(child.pid)
    finally:
        child.kill()
        child.wait()
    assert info.allocation_env == "alloc-9"
    assert info.uid == os.getuid()
    assert info.command is not None and "time.sleep(30)" in info.command


def test_memory_used_leaves_out_the_driver_reserve_as_nvidia_smi_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen on an H200 (driver 580): NVML v1 said 615 MiB used on an idle card,
    # nvidia-smi 0 MiB; v2 splits those 615 MiB off as reserved.
    install_fake_nvml(monkeypatch, [FakeCard()])
    backend = NvmlBackend("node")
    [gpu] = backend.collect().gpus
    backend.close()
    assert (gpu.memory_used_mib, gpu.memory_reserved_mib, gpu.memory_free_mib) == (1234, 560, 80126)
    used = gpu.memory_used_mib + gpu.memory_reserved_mib + gpu.memory_free_mib
    assert used == gpu.memory_total_mib


def test_a_driver_without_memory_v2_falls_back_to_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    card = FakeCard(failures={"memory_v2": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})
    install_fake_nvml(monkeypatch, [card])
    backend = NvmlBackend("node")
    [gpu] = backend.collect().gpus
    backend.close()
    assert gpu.memory_used_mib == 1794 and gpu.memory_reserved_mib is None


def test_costly_slow_fields_are_re_read_only_after_their_period(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = install_fake_nvml(monkeypatch, [FakeCard()])
    now = [1000.0]
    backend = NvmlBackend("node", clock=lambda: now[0])
    readings = []
    for step in (0.0, 1.0, 1.0, 9.0):  # at 1000, 1001, 1002, 1011 s
        now[0] += step
        readings.append(backend.collect().gpus[0])
    backend.close()
    # Energy (10 s) was read at 1000 and 1011 only; utilization at every collection.
    assert calls.count("energy") == 2
    assert calls.count("utilization") == 4
    assert all(r.energy_mj == 123456789 for r in readings)
    assert all(r.pcie_tx_bytes_per_s is not None for r in readings)
