"""The agent as the portal and operators meet it: a real process answering real HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import LISTENING, REPO_ROOT, agent_env, stop

MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L40S")


@pytest.fixture
def cluster(start_agent: Callable[..., Any]) -> Any:
    models = [arg for model in MODELS for arg in ("--model", model)]
    return start_agent(
        "--backend", "sim", "--nodes", "3", "--gpus", "4", "--hostname", "sim",
        "--token", "T", "--interval", "0.2", *models,
        nodes=3,
    )  # fmt: skip


def test_three_virtual_nodes_serve_their_own_snapshots_on_consecutive_ports(
    cluster: Any, get: Callable[..., Any]
) -> None:
    ports = [int(url.rsplit(":", 1)[1]) for url in cluster.urls]
    assert ports == [ports[0], ports[0] + 1, ports[0] + 2]
    assert cluster.nodes == ["sim-01", "sim-02", "sim-03"]
    assert all(line.endswith("backend=sim gpus=4") for line in cluster.lines)

    snapshots = [get(f"{url}/v1/snapshot", token="T") for url in cluster.urls]
    assert [s.status for s in snapshots] == [200, 200, 200]
    assert all(s.headers["Content-Type"] == "application/json" for s in snapshots)
    bodies = [s.json() for s in snapshots]
    assert [b["hostname"] for b in bodies] == ["sim-01", "sim-02", "sim-03"]
    for body, model in zip(bodies, MODELS, strict=True):
        assert body["agent"] == {"version": "0.1.0", "backend": "sim", "interval_s": 0.2}
        assert [gpu["index"] for gpu in body["gpus"]] == [0, 1, 2, 3]
        assert {gpu["name"] for gpu in body["gpus"]} == {model}
    uuids = [gpu["uuid"] for body in bodies for gpu in body["gpus"]]
    assert len(set(uuids)) == 12


def test_snapshot_has_the_documented_keys(cluster: Any, get: Callable[..., Any]) -> None:
    body = get(f"{cluster.urls[0]}/v1/snapshot", token="T").json()
    assert list(body) == [
        "agent", "hostname", "driver_version", "cuda_version",
        "collected_at", "collect_duration_s", "gpus",
    ]  # fmt: skip
    assert body["driver_version"] == "550.54.15"
    assert body["cuda_version"] == "12.4"
    assert abs(body["collected_at"] - time.time()) < 60
    assert 0 <= body["collect_duration_s"] < 1
    gpu = body["gpus"][0]
    assert set(gpu) == {
        "index", "uuid", "name", "pci_bus_id", "serial",
        "memory_total_mib", "memory_used_mib", "memory_free_mib",
        "utilization_gpu_pct", "utilization_memory_pct", "temperature_c",
        "power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz", "energy_mj", "health",
        # An A100-SXM4 (HBM, passively cooled): memory temperature and row remapping, no fan.
        "memory_reserved_mib", "memory_temperature_c",
        "encoder_utilization_pct", "decoder_utilization_pct",
        "pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "pcie_replay_total",
        "gr_engine_active_ratio", "tensor_active_ratio", "dram_active_ratio",
        "ecc_corrected_total", "ecc_uncorrected_total",
        "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_failure",
        "xid_last", "xid_errors", "mig_mode", "processes",
    }  # fmt: skip
    assert gpu["health"] == "ok"
    assert gpu["memory_total_mib"] == 81920
    assert gpu["power_limit_w"] == 400.0


def test_snapshot_without_token_is_refused(cluster: Any, get: Callable[..., Any]) -> None:
    result = get(f"{cluster.urls[0]}/v1/snapshot")
    assert result.status == 401
    assert "error" in result.json()


def test_snapshot_with_wrong_token_is_refused(cluster: Any, get: Callable[..., Any]) -> None:
    assert get(f"{cluster.urls[1]}/v1/snapshot", token="wrong").status == 401
    assert get(f"{cluster.urls[1]}/v1/snapshot", token="TT").status == 401


def test_metrics_and_healthz_need_no_token(cluster: Any, get: Callable[..., Any]) -> None:
    metrics = get(f"{cluster.urls[2]}/metrics")
    assert metrics.status == 200
    assert metrics.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = metrics.body.decode()
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-' in text
    assert 'modelName="NVIDIA L40S",Hostname="sim-03"' in text
    health = get(f"{cluster.urls[2]}/healthz")
    assert health.status == 200
    assert health.json()["status"] == "ok"
    assert health.json()["last_collect_age_s"] < 1


def test_unknown_paths_and_other_methods_are_rejected(
    cluster: Any, get: Callable[..., Any]
) -> None:
    missing = get(f"{cluster.urls[0]}/v2/whatever", token="T")
    assert missing.status == 404
    assert "error" in missing.json()
    posted = get(f"{cluster.urls[0]}/v1/snapshot", token="T", method="POST")
    assert posted.status == 405
    assert posted.headers["Allow"] == "GET"


def test_a_busy_gpu_reading_moves_between_collections(
    cluster: Any, get: Callable[..., Any]
) -> None:
    url = f"{cluster.urls[0]}/v1/snapshot"
    first = get(url, token="T").json()
    busy = max(first["gpus"], key=lambda gpu: gpu["utilization_gpu_pct"])["index"]
    seen = [first]
    for _ in range(4):
        time.sleep(0.25)
        seen.append(get(url, token="T").json())
    assert seen[1]["collected_at"] > first["collected_at"]
    assert seen[2]["gpus"][busy] != first["gpus"][busy]
    assert len({s["gpus"][busy]["utilization_gpu_pct"] for s in seen}) > 1
    energies = [s["gpus"][busy]["energy_mj"] for s in seen]
    assert energies == sorted(energies)
    assert energies[-1] > energies[0]


def test_sigterm_stops_the_agent_cleanly(start_agent: Callable[..., Any]) -> None:
    agent = start_agent("--backend", "sim", "--gpus", "2", "--no-auth", "--hostname", "solo")
    assert agent.nodes == ["solo"]
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(10) == 0
    assert "Traceback" not in agent.stderr()


def test_sigint_stops_the_agent_cleanly(start_agent: Callable[..., Any]) -> None:
    agent = start_agent("--backend", "sim", "--gpus", "1", "--token", "T")
    agent.proc.send_signal(signal.SIGINT)
    assert agent.proc.wait(10) == 0
    assert "Traceback" not in agent.stderr()


def test_nvml_backend_without_a_driver_exits_2_with_a_hint(run_python: Callable[..., Any]) -> None:
    result = run_python(
        "-m", "agents.gpu_agent", "--backend", "nvml", "--no-auth", "--listen", "127.0.0.1:0"
    )
    assert result.returncode == 2
    assert "use --backend sim to run without a GPU" in result.stderr
    assert "NVML" in result.stderr
    assert "gpu-agent listening" not in result.stdout


def test_agent_refuses_to_start_without_a_token(run_python: Callable[..., Any]) -> None:
    result = run_python("-m", "agents.gpu_agent", "--backend", "sim", "--listen", "127.0.0.1:0")
    assert result.returncode == 2
    assert "--no-auth" in result.stderr
    assert "GPU_AGENT_TOKEN" in result.stderr


def test_agent_imports_nothing_from_the_portal_stack(run_python: Callable[..., Any]) -> None:
    code = (
        "import sys, agents.gpu_agent.cli, agents.gpu_agent.server, agents.gpu_agent.backends.sim; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'rest_framework', 'channels', 'celery', 'pynvml', 'prometheus_client')); "
        "assert not bad, bad"
    )
    result = run_python("-c", code)
    assert result.returncode == 0, result.stderr


NVML_NODE = """
import sys
from tests.agent.fake_nvml import FakeCard, install_fake_nvml
install_fake_nvml(setattr, [FakeCard(uuid="GPU-aaaa"), FakeCard(uuid="GPU-bbbb")])
from agents.gpu_agent.cli import main
sys.exit(main(["--backend", "nvml", "--token", "T", "--listen", "127.0.0.1:0",
               "--interval", "0.2", "--hostname", "gpu-07"]))
"""


def test_a_real_node_is_served_by_the_same_loop_as_the_simulator(
    tmp_path: Path, get: Callable[..., Any]
) -> None:
    # NVML through the fake driver: a collector thread beside the one loop thread.
    stderr_path = tmp_path / "stderr.log"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", NVML_NODE], cwd=REPO_ROOT, env=agent_env(),
            stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        match = LISTENING.match(proc.stdout.readline().rstrip("\n"))
        assert match, stderr_path.read_text()
        assert (match["node"], match["backend"], match["gpus"]) == ("gpu-07", "nvml", "2")
        url = match["url"]
        assert get(f"{url}/v1/snapshot", token="T").json()["hostname"] == "gpu-07"
        assert get(f"{url}/v1/snapshot").status == 401
        body = json.dumps({"slices": [{
            "allocation_id": "a-1", "gpu_uuid": "GPU-bbbb", "compute_pct": 25,
            "memory_mib": 512, "owner": "bob",
        }]}).encode()  # fmt: skip
        headers = {"Content-Type": "application/json"}
        put = get(f"{url}/v1/desired-state", token="T", method="PUT", headers=headers, data=body)
        assert put.status == 200, put.body
        time.sleep(0.5)  # the next pass of the collector, within one interval, attributes it
        snapshot = get(f"{url}/v1/snapshot", token="T").json()
        assert [a["allocation_id"] for a in snapshot["allocations"]] == ["a-1"]
        assert get(f"{url}/healthz").json()["status"] == "ok"
        assert len(list(Path(f"/proc/{proc.pid}/task").iterdir())) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        stop(proc)
    assert "Traceback" not in stderr_path.read_text()
