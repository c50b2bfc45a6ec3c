"""Scenario files drive the simulator: loads, faults and processes on a script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.gpu_agent.backends.scenario import ScenarioError, load_scenario, parse_scenario
from agents.gpu_agent.backends.sim import SimulatedBackend

T0 = 1_764_500_000.0

SCRIPT = """
gpus: 4
model: NVIDIA H100 80GB HBM3
repeat_s: 300
events:
  - {at_s: 0, gpu: 0, load: busy, util_pct: 90, memory_fraction: 0.5}
  - {at_s: 0, gpu: 1, load: ramp, from_pct: 0, to_pct: 100, over_s: 100}
  - {at_s: 0, gpu: 2, load: periodic, util_pct: 95, period_s: 60, duty: 0.5}
  - at_s: 5
    gpu: 0
    start_process:
      pid: 4242
      user: alice
      command: python train.py
      memory_mib: 30000
      env: {GPU_PORTAL_ALLOCATION: a-17}
  - {at_s: 20, gpu: 3, overheat: true}
  - {at_s: 40, gpu: 0, xid: 13}
  - {at_s: 41, gpu: 0, xid: 13}
  - {at_s: 45, gpu: 0, ecc: {corrected: 10, uncorrected: 1}}
  - {at_s: 50, gpu: 2, lost: true}
  - {at_s: 90, gpu: 0, stop_process: 4242}
"""


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def backend_at(tmp_path: Path, text: str = SCRIPT, suffix: str = ".yaml") -> tuple[Any, Clock]:
    path = tmp_path / f"scenario{suffix}"
    path.write_text(text)
    scenario = load_scenario(path)
    clock = Clock()
    gpus = scenario.gpus or 1
    backend = SimulatedBackend(
        "scripted", gpus, scenario.model or "NVIDIA A10", 1, clock, None, scenario
    )
    return backend, clock


def run_until(backend: SimulatedBackend, clock: Clock, t: float) -> Any:
    snapshot = None
    while clock.now < T0 + t:
        clock.now += 1.0
        snapshot = backend.collect()
    return snapshot


def test_a_yaml_scenario_scripts_loads_processes_and_faults(tmp_path: Path) -> None:
    backend, clock = backend_at(tmp_path)
    early = run_until(backend, clock, 10)
    assert early.gpus[0].name == "NVIDIA H100 80GB HBM3"
    busy, ramp, periodic, hot = early.gpus
    assert busy.utilization_gpu_pct > 60
    assert ramp.utilization_gpu_pct < 30  # 10 s into a 100 s ramp
    [proc] = busy.processes
    assert (proc.pid, proc.user, proc.memory_used_mib, proc.allocation_env) == (
        4242,
        "alice",
        30000,
        "a-17",
    )
    assert "allocation_env" not in proc.to_dict()  # the environment never leaves the node
    later = run_until(backend, clock, 80)
    busy, ramp, periodic, hot = later.gpus
    assert ramp.utilization_gpu_pct > 60
    assert hot.temperature_c > backend_spec_max(hot) + 5
    assert busy.xid_last == 13
    assert [(x.xid, x.count) for x in busy.xid_errors] == [(13, 2)]
    assert (busy.ecc_corrected_total, busy.ecc_uncorrected_total) == (10, 1)
    assert periodic.health == "lost"
    assert periodic.utilization_gpu_pct is None  # a lost card reports no readings
    assert periodic.uuid is not None
    done = run_until(backend, clock, 100)
    assert done.gpus[0].processes == []


def backend_spec_max(gpu: Any) -> float:
    from agents.gpu_agent.backends.sim_specs import spec_for

    return spec_for(gpu.name).max_temp_c


def test_a_repeating_scenario_brings_cards_back_and_keeps_counting(tmp_path: Path) -> None:
    backend, clock = backend_at(tmp_path)
    run_until(backend, clock, 100)
    again = run_until(backend, clock, 310)  # 10 s into the second cycle
    assert again.gpus[2].health == "ok"
    assert [p.pid for p in again.gpus[0].processes] == [4242]
    assert again.gpus[0].ecc_corrected_total == 10  # counters never go back
    final = run_until(backend, clock, 350)
    assert final.gpus[0].ecc_corrected_total == 20


def test_a_json_scenario_needs_nothing_but_the_standard_library(tmp_path: Path) -> None:
    text = json.dumps({"events": [{"gpu": "all", "load": "busy", "util_pct": 80}]})
    backend, clock = backend_at(tmp_path, text, ".json")
    snapshot = run_until(backend, clock, 30)
    assert len(snapshot.gpus) == 1
    assert snapshot.gpus[0].utilization_gpu_pct > 50


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a scenario is a mapping"),
        ({"events": [{"at_s": 0, "gpu": 0, "load": "sleepy"}]}, r"events\[0\].load"),
        ({"events": [{"gpu": 0, "util_pct": 150, "load": "busy"}]}, "outside 0..100"),
        ({"events": [{"gpu": 0, "explode": True}]}, "unknown keys"),
        ({"events": [{"gpu": -1, "xid": 79}]}, "indexes count from 0"),
        ({"events": [{"gpu": 0}]}, "no action"),
        ({"events": [{"gpu": 0, "start_process": {"pid": 1}}]}, "user is required"),
        ({"repeat_s": 10, "events": [{"at_s": 20, "xid": 13}]}, "never run"),
    ],
)
def test_a_bad_scenario_is_refused_with_where_and_why(data: object, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        parse_scenario(data)


def test_the_agent_refuses_to_start_with_a_bad_scenario(tmp_path: Path, run_python: Any) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"events": [{"gpu": 0, "load": "sleepy"}]}')
    result = run_python(
        "-m", "agents.gpu_agent", "--backend", "sim", "--no-auth", "--scenario", str(path)
    )
    assert result.returncode == 2
    assert "bad scenario" in result.stderr
    assert "events[0].load" in result.stderr


def test_the_agent_serves_a_scripted_node(tmp_path: Path, start_agent: Any, get: Any) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"gpus": 2, "events": [{"gpu": 1, "lost": True}]}))
    agent = start_agent("--backend", "sim", "--no-auth", "--scenario", str(path))
    body = get(f"{agent.urls[0]}/v1/snapshot").json()
    assert [g["health"] for g in body["gpus"]] == ["ok", "lost"]
