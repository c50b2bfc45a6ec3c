"""The vendor-tool backends, run against real executables: a small script put first on PATH
that prints a capture from ../shared/anchors (read there at test time), so the subprocess,
its timeout and its exit status are the real ones. Plus a tool that fails and one that hangs."""

from __future__ import annotations

import json
import os
import shlex
import stat
import time
from pathlib import Path

import pytest

from agents.gpu_agent.backends.base import BackendUnavailable
from agents.gpu_agent.backends.procinfo import ProcessInspector
from agents.gpu_agent.backends.smi.tool import (
    AmdSmiBackend,
    AscendBackend,
    CambriconBackend,
    HygonBackend,
    MetaxBackend,
    MooreThreadsBackend,
    RocmBackend,
    ToolFailed,
)
from agents.gpu_agent.cli import auto_backend, build_parser, make_backends
from agents.gpu_agent.metrics import render
from agents.gpu_agent.model import NodeSnapshot
from agents.gpu_agent.schema import check_snapshot
from tests.anchors import accelerator_file

ASCEND_910B = "real_npu-smi-info_910B2C_v23.0.3_with-processes_vllm-ascend-324.txt"
HYGON_JSON = "gpustack-test_rocm-smi-json_hygon-K100_AI_dtk24.04.3_anonymised.json"
HYGON_TABLE = "real_hy-smi_8dcu_vllm-loaded_wang-junjian-blog.txt"


def tool(bin_dir: Path, name: str, body: str) -> Path:
    """An executable ``name`` in ``bin_dir`` running the shell ``body``."""
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def printing(bin_dir: Path, name: str, capture: Path, fail_flag: Path | None = None) -> Path:
    """A tool printing ``capture``; exits 3 with a driver-like message while ``fail_flag``
    exists."""
    body = f"cat {shlex.quote(str(capture))}"
    if fail_flag is not None:
        body = (
            f"if [ -e {shlex.quote(str(fail_flag))} ]; then "
            "echo 'dcmi module initialize failed. ret is -8005' >&2; exit 3; fi\n" + body
        )
    return tool(bin_dir, name, body)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    return path


@pytest.fixture
def no_proc(tmp_path: Path) -> ProcessInspector:
    # The captured PIDs may exist on this machine as unrelated processes: look them up in an
    # empty /proc, so the tool's own process name is what the reading shows.
    root = tmp_path / "proc"
    root.mkdir()
    return ProcessInspector(root)


def test_ascend_backend_reads_npu_smi_through_a_subprocess(bin_dir, no_proc) -> None:
    exe = printing(bin_dir, "npu-smi", accelerator_file("ascend", ASCEND_910B))
    backend = AscendBackend("npu-node-1", executable=str(exe), inspector=no_proc)
    snap = backend.collect()
    assert snap.driver_version == "23.0.3"
    assert [(g.index, g.name, g.memory_used_mib, g.memory_total_mib, g.memory_free_mib,
             g.power_w, g.temperature_c, g.vendor, g.health) for g in snap.gpus] == [
        (0, "Ascend 910B2C", 52675, 65536, 12861, 91.3, 53, "ascend", "ok"),
        (1, "Ascend 910B2C", 52665, 65536, 12871, 100.7, 55, "ascend", "ok"),
        (2, "Ascend 910B2C", 52667, 65536, 12869, 92.8, 55, "ascend", "ok"),
        (3, "Ascend 910B2C", 52665, 65536, 12871, 92.9, 55, "ascend", "ok"),
    ]  # fmt: skip
    assert [(p.pid, p.command, p.memory_used_mib) for p in snap.gpus[0].processes] == [
        (78617, "python", 49385)
    ]
    # npu-smi prints no UUID: a stable one is derived from the node and the bus id.
    uuids = [g.uuid for g in snap.gpus]
    assert all(u.startswith("ascend-") for u in uuids) and len(set(uuids)) == 4
    again = AscendBackend("npu-node-1", executable=str(exe), inspector=no_proc).collect()
    assert [g.uuid for g in again.gpus] == uuids
    other = AscendBackend("npu-node-2", executable=str(exe), inspector=no_proc).collect()
    assert not set(uuids) & {g.uuid for g in other.gpus}
    # The portal's own check accepts the snapshot as it is sent.
    portal = json.loads(json.dumps(snap.to_portal_dict()))
    assert check_snapshot(portal) == portal
    full = json.loads(json.dumps(snap.to_dict()))
    assert full["gpus"][0]["vendor"] == "ascend"
    assert full["gpus"][0]["vendor_readings"] == {
        "hugepages_used": 0, "hugepages_total": 0, "hbm_used_mib": 52675, "hbm_total_mib": 65536
    }  # fmt: skip


def test_ascend_warning_health_is_kept_in_the_vendors_word(bin_dir, no_proc) -> None:
    capture = accelerator_file("ascend", "doc_npu-smi-info_910_v24.1.RC2_with-processes.txt")
    exe = printing(bin_dir, "npu-smi", capture)
    gpus = AscendBackend("n", executable=str(exe), inspector=no_proc).collect().gpus
    assert [(g.index, g.health, g.health_detail) for g in gpus if g.health != "ok"] == [
        (3, "warning", "Warning"),
        (7, "warning", "Warning"),
    ]
    assert gpus[0].vendor_readings == {
        "hugepages_used": 1232, "hugepages_total": 1232, "ddr_used_mib": 4252,
        "ddr_total_mib": 15137, "hbm_used_mib": 0, "hbm_total_mib": 32768,
    }  # fmt: skip


def test_a_failing_tool_marks_the_known_cards_lost_with_its_message(bin_dir, tmp_path) -> None:
    flag = tmp_path / "fail"
    exe = printing(bin_dir, "npu-smi", accelerator_file("ascend", ASCEND_910B), flag)
    backend = AscendBackend("n", executable=str(exe), inspector=ProcessInspector(tmp_path))
    flag.touch()
    # Nothing known yet: the collector logs this and keeps trying.
    with pytest.raises(ToolFailed, match="exited with status 3: dcmi module initialize"):
        backend.collect()
    flag.unlink()
    assert all(g.health == "ok" for g in backend.collect().gpus)
    flag.touch()
    snap = backend.collect()
    assert [(g.index, g.health) for g in snap.gpus] == [(i, "lost") for i in range(4)]
    assert {g.health_detail for g in snap.gpus} == {
        f"{exe} exited with status 3: dcmi module initialize failed. ret is -8005"
    }
    # Identity stays, readings go: a card that cannot be read shows no stale numbers.
    assert snap.gpus[0].name == "Ascend 910B2C" and snap.gpus[0].memory_used_mib is None
    flag.unlink()
    assert backend.collect().gpus[0].health == "ok"


def test_a_hanging_tool_times_out_and_the_cards_are_lost(bin_dir, tmp_path) -> None:
    flag = tmp_path / "hang"
    capture = accelerator_file("ascend", ASCEND_910B)
    exe = tool(
        bin_dir,
        "npu-smi",
        f"if [ -e {shlex.quote(str(flag))} ]; then exec sleep 30; fi\n"
        f"cat {shlex.quote(str(capture))}",
    )
    backend = AscendBackend("n", executable=str(exe), timeout_s=0.5)
    backend.collect()
    flag.touch()
    snap = backend.collect()
    assert {g.health for g in snap.gpus} == {"lost"}
    assert snap.gpus[0].health_detail == f"{exe} did not answer within 0.5 s"


def test_output_that_is_no_table_is_a_failure_not_zero_cards(bin_dir) -> None:
    exe = tool(bin_dir, "npu-smi", "echo 'Usage: npu-smi info <watch|proc|-h|-m|-l|-t type>'")
    with pytest.raises(ToolFailed, match="no NPU table"):
        AscendBackend("n", executable=str(exe)).collect()


def test_hygon_backend_reads_hy_smi_json(bin_dir) -> None:
    printing(bin_dir, "hy-smi", accelerator_file("hygon", HYGON_JSON))
    backend = HygonBackend("dcu-1", executable=str(bin_dir / "hy-smi"))
    (gpu,) = backend.collect().gpus
    assert (gpu.vendor, gpu.uuid, gpu.name, gpu.memory_used_mib, gpu.memory_total_mib,
            gpu.power_w, gpu.temperature_c) == (
        "hygon", "7100fa8866904061", "DCU xxxx", 2, 65520, 80.0, 41
    )  # fmt: skip


def test_hygon_backend_falls_back_to_the_table(bin_dir) -> None:
    table = accelerator_file("hygon", HYGON_TABLE)
    tool(
        bin_dir,
        "hy-smi",
        'case "$*" in *--json*) echo "unrecognized arguments: --json" >&2; exit 2;; esac\n'
        f"cat {shlex.quote(str(table))}",
    )
    gpus = HygonBackend("dcu-1", executable=str(bin_dir / "hy-smi")).collect().gpus
    assert [(g.index, g.utilization_gpu_pct, g.temperature_c) for g in gpus][:2] == [
        (0, 74, 67),
        (1, 29, 68),
    ]
    assert gpus[0].memory_used_mib is None and gpus[0].vendor_readings == {"vram_used_pct": 87}


def test_rocm_smi_and_amd_smi_backends(bin_dir) -> None:
    printing(
        bin_dir,
        "rocm-smi",
        accelerator_file("amd", "telegraf-test_rocm-smi-json_mi100_rocm602.json"),
    )
    gpus = RocmBackend("mi", executable=str(bin_dir / "rocm-smi")).collect().gpus
    assert [g.pci_bus_id for g in gpus] == [f"0000:{b}:00.0" for b in ("83", "A3", "C3", "E3")]
    assert (gpus[0].uuid, gpus[0].pci_bus_id, gpus[0].vendor) == (
        "0x79ccd55167a2124a", "0000:83:00.0", "amd"
    )  # fmt: skip
    capture = accelerator_file("amd", "doc_amd-smi-metric-p-json_list-format_amdsmi-changelog.json")
    printing(bin_dir, "amd-smi", capture)
    (gpu,) = AmdSmiBackend("navi", executable=str(bin_dir / "amd-smi")).collect().gpus
    assert (gpu.power_w, gpu.memory_used_mib, gpu.vendor) == (10.0, None, "amd")


def test_a_missing_tool_cannot_start(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BackendUnavailable, match="npu-smi is not on PATH"):
        AscendBackend("n")


def test_auto_picks_the_tool_on_path(bin_dir, monkeypatch) -> None:
    printing(bin_dir, "hy-smi", accelerator_file("hygon", HYGON_JSON))
    printing(bin_dir, "rocm-smi", accelerator_file("hygon", HYGON_JSON))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    backend = auto_backend("n")
    if backend.name == "nvml":
        backend.close()
        pytest.skip("this machine has a working NVIDIA driver: auto rightly picks nvml")
    assert isinstance(backend, HygonBackend)
    assert backend.collect().gpus[0].vendor == "hygon"


def test_auto_with_nothing_says_what_it_looked_for(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        backend = auto_backend("n")
    except BackendUnavailable as exc:
        assert (
            "none of npu-smi, hy-smi, rocm-smi, amd-smi, mx-smi, mthreads-gmi, cnmon is on PATH"
            in str(exc)
        )
    else:
        backend.close()
        pytest.skip("this machine has a working NVIDIA driver")


def test_cli_builds_the_named_tool_backend(bin_dir, monkeypatch) -> None:
    printing(bin_dir, "npu-smi", accelerator_file("ascend", ASCEND_910B))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    args = build_parser().parse_args(["--backend", "npu-smi", "--tool-timeout", "3"])
    (backend,) = make_backends(args)
    assert isinstance(backend, AscendBackend) and backend.timeout_s == 3.0
    snap = backend.collect()
    assert isinstance(snap, NodeSnapshot) and len(snap.gpus) == 4


def _series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_metrics_write_npu_exporter_names_beside_dcgm_names(bin_dir, no_proc) -> None:
    exe = printing(bin_dir, "npu-smi", accelerator_file("ascend", ASCEND_910B))
    snap = AscendBackend("npu-node-1", executable=str(exe), inspector=no_proc).collect()
    text = render(snap)
    uuid0 = snap.gpus[0].uuid
    assert _series(text, "npu_chip_info_hbm_used_memory")[0] == (
        f'npu_chip_info_hbm_used_memory{{id="0",model_name="Ascend 910B2C",vdie_id="{uuid0}",'
        'pcie_bus_info="0000:D9:00.0",namespace="",pod_name="",container_name=""} 52675'
    )
    assert [s.rsplit(" ", 1)[1] for s in _series(text, "npu_chip_info_power")] == [
        "91.3", "100.7", "92.8", "92.9"
    ]  # fmt: skip
    assert [s.rsplit(" ", 1)[1] for s in _series(text, "npu_chip_info_health_status")] == ["1"] * 4
    assert _series(text, "machine_npu_nums") == ['machine_npu_nums{node="npu-node-1"} 4']
    # DDR is 0 / 0 on a 910B: no DDR series rather than a zero total.
    assert _series(text, "npu_chip_info_total_memory") == []
    # The common names too, with the card's device file.
    (used,) = [s for s in _series(text, "DCGM_FI_DEV_FB_USED") if 'gpu="1"' in s]
    assert 'device="davinci1"' in used and used.endswith(" 52665")
    assert "dcu_temp" not in text and "gpu_gfx_activity" not in text


def test_metrics_write_dcu_exporter_names_for_hygon(bin_dir) -> None:
    printing(bin_dir, "hy-smi", accelerator_file("hygon", HYGON_JSON))
    snap = HygonBackend("dcu-1", executable=str(bin_dir / "hy-smi")).collect()
    text = render(snap)
    assert _series(text, "dcu_usedmemory_bytes") == [
        f'dcu_usedmemory_bytes{{device_id="7100fa8866904061",minor_number="0",node="dcu-1"}} '
        f"{2 * 1024 * 1024}"
    ]
    assert [s.rsplit(" ", 1)[1] for s in _series(text, "dcu_power_usage")] == ["80.0"]
    # The capture shows no power cap: no dcu_powercap family at all.
    assert "dcu_powercap" not in text
    assert "npu_chip_info" not in text


def test_lost_cards_write_no_vendor_readings(bin_dir, tmp_path) -> None:
    flag = tmp_path / "fail"
    exe = printing(bin_dir, "npu-smi", accelerator_file("ascend", ASCEND_910B), flag)
    backend = AscendBackend("n", executable=str(exe), inspector=ProcessInspector(tmp_path))
    backend.collect()
    flag.touch()
    text = render(backend.collect())
    assert "npu_chip_info" not in text
    assert [s.rsplit(" ", 1)[1] for s in _series(text, "gpu_agent_gpu_lost")] == ["1"] * 4


@pytest.mark.parametrize(
    ("backend", "vendor", "capture", "driver", "first"),
    [
        (MetaxBackend, "metax", "real_mx-smi_MXC500x4_v2.1.6_vllm-loaded_wang-junjian-blog.txt",
         "2.5.014", ("MXC500", 60982, 65536, 71.0, "ok", [(15652, "python", 60032)])),
        (MooreThreadsBackend, "moorethreads",
         "real_mthreads-gmi_MTT-S80_gmi1.14.0_drv2.7.0_llama-box-98pct_gpustack-docs.txt",
         "2.7.0", ("MTT S80", 1339, 16384, None, "ok",
                   [(120, "...ird_party/bin/llama-box/llama-box", 2),
                    (2022, "...ird_party/bin/llama-box/llama-box", 1333)])),
        (CambriconBackend, "cambricon", "doc_cnmon_MLU370-X8x2_v5.10.13_paddle-docs.txt",
         "5.10.13", ("MLU370-X8", 0, 23374, 106.0, "ok", None)),
    ],
)  # fmt: skip
def test_table_backends(bin_dir, no_proc, backend, vendor, capture, driver, first) -> None:
    exe = printing(bin_dir, backend.tool, accelerator_file(vendor, capture))
    snap = backend("n", executable=str(exe), inspector=no_proc).collect()
    gpu = snap.gpus[0]
    procs = None if gpu.processes is None else [
        (p.pid, p.command, p.memory_used_mib) for p in gpu.processes
    ]  # fmt: skip
    assert snap.driver_version == driver
    assert (gpu.name, gpu.memory_used_mib, gpu.memory_total_mib, gpu.power_w, gpu.health,
            procs) == first  # fmt: skip
    assert gpu.vendor == vendor and gpu.uuid.startswith(f"{vendor}-")


def test_moore_threads_memory_over_total_is_flagged(bin_dir) -> None:
    capture = "doc_mthreads-gmi_MTT-S4000_gmi1.12.2_drv1.2.0_FAQ-memory-shown-32768-fault.txt"
    exe = printing(bin_dir, "mthreads-gmi", accelerator_file("moorethreads", capture))
    (gpu,) = MooreThreadsBackend("n", executable=str(exe)).collect().gpus
    assert (gpu.health, gpu.health_detail) == (
        "unhealthy", "reports more memory used than its total"
    )  # fmt: skip
    # No negative free memory is made up from the impossible pair.
    assert gpu.memory_free_mib == 0


def test_metrics_write_mlu_exporter_names_for_cambricon(bin_dir) -> None:
    capture = accelerator_file("cambricon", "doc_cnmon_MLUXXX-x8_v5.10.31_masked_paddlenlp.txt")
    exe = printing(bin_dir, "cnmon", capture)
    snap = CambriconBackend("mlu-1", executable=str(exe)).collect()
    text = render(snap)
    assert _series(text, "mlu_power_usage")[0] == (
        f'mlu_power_usage{{driver="5.10.31",mcu="",mlu="0",model="MLUXXX-XX",node="mlu-1",'
        f'node_ip="",sn="",type="",uuid="{snap.gpus[0].uuid}"}} 105.0'
    )
    # Total memory is masked in the capture: no total, no free, but used (0 B) is there.
    assert _series(text, "mlu_memory_total") == [] and _series(text, "mlu_memory_free") == []
    assert len(_series(text, "mlu_memory_used")) == 8


def _wait_for(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_the_agent_serves_an_ascend_node_and_survives_its_tool_failing(
    bin_dir, tmp_path, monkeypatch, start_agent, get
) -> None:
    flag = tmp_path / "fail"
    flag.touch()  # the tool fails from the start: the agent must start anyway
    printing(bin_dir, "npu-smi", accelerator_file("ascend", ASCEND_910B), flag)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    agent = start_agent("--backend", "npu-smi", "--no-auth", "--interval", "0.2")
    url = agent.urls[0]
    assert get(f"{url}/healthz").status == 503
    flag.unlink()

    def snapshot():
        answer = get(f"{url}/v1/snapshot")
        return answer.json() if answer.status == 200 else None

    snap = _wait_for(snapshot)
    assert snap is not None, agent.stderr()
    assert snap["agent"]["backend"] == "npu-smi"
    assert [(g["name"], g["vendor"], g["memory_used_mib"]) for g in snap["gpus"]] == [
        ("Ascend 910B2C", "ascend", used) for used in (52675, 52665, 52667, 52665)
    ]
    metrics = get(f"{url}/metrics").body.decode()
    assert "npu_chip_info_hbm_used_memory{" in metrics and "DCGM_FI_DEV_FB_USED{" in metrics
    flag.touch()

    def lost():
        gpus = (snapshot() or {}).get("gpus", [])
        return gpus if gpus and all(g["health"] == "lost" for g in gpus) else None

    gpus = _wait_for(lost)
    assert gpus, agent.stderr()
    assert "exited with status 3: dcmi module initialize failed" in gpus[0]["health_detail"]
    assert agent.proc.poll() is None  # still serving
    assert get(f"{url}/healthz").status == 200


def test_a_chip_not_ok_gets_its_error_codes_from_the_health_query(bin_dir, no_proc) -> None:
    table = accelerator_file("ascend", "doc_npu-smi-info_910_v24.1.RC2_with-processes.txt")
    alarm = accelerator_file(
        "ascend", "mindcluster-test_npu-smi-health-alarm_910A_driver23.0.7_collect-log.txt"
    )
    exe = tool(
        bin_dir,
        "npu-smi",
        f'case "$*" in "info -i 3 -c 0 -t health") cat {shlex.quote(str(alarm))};;\n'
        '  *"-t health"*) echo "Invalid card id." >&2; exit 1;;\n'
        f"  *) cat {shlex.quote(str(table))};; esac",
    )
    gpus = AscendBackend("n", executable=str(exe), inspector=no_proc).collect().gpus
    not_ok = [(g.index, g.health, g.health_detail) for g in gpus if g.health != "ok"]
    assert [(i, h) for i, h, _ in not_ok] == [(3, "unhealthy"), (7, "warning")]
    detail = not_ok[0][2]
    # Status, then the error codes, then the information with its continuation lines.
    assert detail.startswith("Alarm: A4025021 8C03A000 8C084E00: ascend_monitor adda")
    assert detail.endswith("event state=Heartbeat Lost.") and "\n" not in detail
    # The health query failed for NPU 7: the table's word stays.
    assert not_ok[1][2] == "Warning"


@pytest.mark.parametrize(
    ("backend", "vendor", "capture", "argv"),
    [
        (HygonBackend, "hygon", HYGON_JSON,
         "--showid --showmeminfo vram --showpower --showserial --showuse --showtemp "
         "--showproductname --showuniqueid --json"),
        (RocmBackend, "amd", "telegraf-test_rocm-smi-json_mi100_rocm602.json",
         "--showid --showmeminfo vram --showpower --showserial --showuse --showtemp "
         "--showproductname --showuniqueid --showbus --showmemuse --json"),
        (AscendBackend, "ascend", ASCEND_910B, "info"),
    ],
)  # fmt: skip
def test_the_tool_gets_the_arguments_its_capture_was_made_with(
    bin_dir, tmp_path, backend, vendor, capture, argv
) -> None:
    record = tmp_path / "argv"
    path = accelerator_file(vendor, capture)
    tool(
        bin_dir,
        backend.tool,
        f'echo "$*" >> {shlex.quote(str(record))}\ncat {shlex.quote(str(path))}',
    )
    backend("n", executable=str(bin_dir / backend.tool)).collect()
    assert record.read_text().splitlines() == [argv]


def test_the_health_query_is_run_once_a_minute_not_every_collection(bin_dir, tmp_path) -> None:
    record = tmp_path / "argv"
    table = accelerator_file("ascend", "doc_npu-smi-info_910_v24.1.RC2_with-processes.txt")
    exe = tool(
        bin_dir,
        "npu-smi",
        f'echo "$*" >> {shlex.quote(str(record))}\n'
        'case "$*" in *"-t health"*) exit 1;; esac\n'
        f"cat {shlex.quote(str(table))}",
    )
    now = [1000.0]
    backend = AscendBackend("n", executable=str(exe), clock=lambda: now[0])
    for _ in range(3):
        backend.collect()
        now[0] += 1
    now[0] += 60
    backend.collect()
    runs = record.read_text().splitlines()
    assert runs.count("info") == 4
    # Two chips not OK (NPUs 3 and 7): asked at the first collection and after a minute.
    assert sorted(r for r in runs if "health" in r) == sorted(
        ["info -i 3 -c 0 -t health", "info -i 7 -c 0 -t health"] * 2
    )
