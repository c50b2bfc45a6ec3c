"""Scenario files: a script of what happens to a simulated node, in YAML or JSON.

    gpus: 4                       # optional; --gpus overrides
    model: NVIDIA H100 80GB HBM3  # optional; --model overrides
    repeat_s: 600                 # optional: the script starts over every 600 s
    events:
      - {at_s: 0, gpu: all, load: idle}
      - {at_s: 0, gpu: 0, load: busy, util_pct: 85, memory_fraction: 0.6}
      - {at_s: 0, gpu: 1, load: ramp, from_pct: 0, to_pct: 100, over_s: 120}
      - {at_s: 0, gpu: 2, load: periodic, util_pct: 95, period_s: 60, duty: 0.5}
      - {at_s: 5, gpu: 0, start_process: {pid: 4242, user: alice, command: python train.py,
                                          memory_mib: 30000, env: {GPU_PORTAL_ALLOCATION: a-17}}}
      - {at_s: 30, gpu: 3, overheat: true}
      - {at_s: 40, gpu: 0, xid: 13}
      - {at_s: 45, gpu: 0, ecc: {corrected: 10, uncorrected: 1}}
      - {at_s: 50, gpu: 2, lost: true}
      - {at_s: 90, gpu: 0, stop_process: 4242}

Times are seconds since the agent started. Each event names one card (``gpu: 2``),
several (``gpu: [0, 1]``) or ``all``, and any of the actions below. When the script
repeats, cards come back (not lost, not overheating, no processes) and the events
run again; ECC and XID counters keep counting, as a driver's would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.gpu_agent.backends.sim_gpu import SimGpu, SimProcess
from agents.gpu_agent.backends.sim_specs import LoadProfile
from agents.gpu_agent.backends.xid import FATAL_XIDS

ACTIONS = {"load", "overheat", "xid", "ecc", "lost", "start_process", "stop_process"}
LOAD_KEYS = {
    "idle": set(),
    "busy": {"util_pct", "memory_fraction"},
    "periodic": {"util_pct", "memory_fraction", "period_s", "duty"},
    "ramp": {"from_pct", "to_pct", "over_s", "memory_fraction"},
}
PROCESS_KEYS = {"pid", "user", "command", "memory_mib", "uid", "env"}


class ScenarioError(ValueError):
    """The scenario file is not what this module documents; the message says where."""


@dataclass(frozen=True)
class Event:
    at_s: float
    gpus: tuple[int, ...] | None  # None: every card
    actions: dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    events: tuple[Event, ...]
    gpus: int | None = None
    model: str | None = None
    repeat_s: float | None = None


def _number(where: str, value: Any, low: float, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(f"{where}: expected a number, got {value!r}")
    if value < low or (high is not None and value > high):
        raise ScenarioError(f"{where}: {value} is outside {low}..{high if high else 'inf'}")
    return float(value)


def _check_keys(where: str, data: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(data) - allowed
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")


def _gpus(where: str, value: Any) -> tuple[int, ...] | None:
    if value == "all":
        return None
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        raise ScenarioError(f"{where}.gpu: expected an index, a list of indexes or 'all'")
    if any(i < 0 for i in items):
        raise ScenarioError(f"{where}.gpu: indexes count from 0")
    return tuple(items)


def _validate_actions(where: str, actions: dict[str, Any]) -> None:
    if not actions:
        raise ScenarioError(f"{where}: no action; use one of {sorted(ACTIONS)}")
    if "load" in actions:
        kind = actions["load"]
        if kind not in LOAD_KEYS:
            raise ScenarioError(f"{where}.load: expected one of {sorted(LOAD_KEYS)}")
    for key in ("util_pct", "from_pct", "to_pct"):
        if key in actions:
            _number(f"{where}.{key}", actions[key], 0, 100)
    for key in ("period_s", "over_s"):
        if key in actions:
            _number(f"{where}.{key}", actions[key], 0.001)
    for key in ("memory_fraction", "duty"):
        if key in actions:
            _number(f"{where}.{key}", actions[key], 0, 1)
    for key in ("overheat", "lost"):
        if key in actions and not isinstance(actions[key], bool):
            raise ScenarioError(f"{where}.{key}: expected true or false")
    if "xid" in actions:
        _number(f"{where}.xid", actions["xid"], 1)
    if "ecc" in actions:
        ecc = actions["ecc"]
        if not isinstance(ecc, dict):
            raise ScenarioError(f"{where}.ecc: expected {{corrected: N, uncorrected: N}}")
        _check_keys(f"{where}.ecc", ecc, {"corrected", "uncorrected", "row_remap_failure"})
        for key in ("corrected", "uncorrected"):
            _number(f"{where}.ecc.{key}", ecc.get(key, 0), 0)
    if "start_process" in actions:
        proc = actions["start_process"]
        if not isinstance(proc, dict):
            raise ScenarioError(f"{where}.start_process: expected a mapping")
        _check_keys(f"{where}.start_process", proc, PROCESS_KEYS)
        for key in ("pid", "user", "memory_mib"):
            if key not in proc:
                raise ScenarioError(f"{where}.start_process: {key} is required")
        _number(f"{where}.start_process.pid", proc["pid"], 1)
        _number(f"{where}.start_process.memory_mib", proc["memory_mib"], 0)
        env = proc.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ScenarioError(f"{where}.start_process.env: expected NAME: text pairs")
    if "stop_process" in actions:
        _number(f"{where}.stop_process", actions["stop_process"], 1)


def parse_scenario(data: Any) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("a scenario is a mapping with an 'events' list")
    _check_keys("scenario", data, {"gpus", "model", "repeat_s", "events", "description"})
    raw_events = data.get("events")
    if not isinstance(raw_events, list):
        raise ScenarioError("scenario.events: expected a list")
    events = []
    for n, raw in enumerate(raw_events):
        where = f"events[{n}]"
        if not isinstance(raw, dict):
            raise ScenarioError(f"{where}: expected a mapping")
        _check_keys(where, raw, {"at_s", "gpu"} | ACTIONS | set().union(*LOAD_KEYS.values()))
        at_s = _number(f"{where}.at_s", raw.get("at_s", 0), 0)
        gpus = _gpus(where, raw.get("gpu", "all"))
        actions = {k: v for k, v in raw.items() if k not in {"at_s", "gpu"}}
        _validate_actions(where, actions)
        events.append(Event(at_s, gpus, actions))
    gpus = data.get("gpus")
    if gpus is not None:
        gpus = int(_number("scenario.gpus", gpus, 0, 4096))
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise ScenarioError("scenario.model: expected a GPU model name")
    repeat_s = data.get("repeat_s")
    if repeat_s is not None:
        repeat_s = _number("scenario.repeat_s", repeat_s, 1)
        late = [e.at_s for e in events if e.at_s >= repeat_s]
        if late:
            raise ScenarioError(f"scenario: events at {late} s never run with repeat_s {repeat_s}")
    # Stable sort: events at the same time apply in file order.
    return Scenario(tuple(sorted(events, key=lambda e: e.at_s)), gpus, model, repeat_s)


def load_scenario(path: Path) -> Scenario:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read {path}: {exc}") from exc
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{path}: {exc}") from exc
    else:
        try:
            import yaml  # optional: JSON scenarios need nothing beyond the standard library
        except ImportError as exc:
            raise ScenarioError(
                f"{path}: YAML scenarios need PyYAML (pip install PyYAML); or write it as JSON"
            ) from exc
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{path}: {exc}") from exc
    return parse_scenario(data)


class ScenarioRunner:
    """Applies a scenario's events to the cards as simulated time passes."""

    def __init__(self, scenario: Scenario, t0: float) -> None:
        self.scenario = scenario
        self._t0 = t0
        self._cycle = 0
        self._next = 0

    def advance(self, now: float, gpus: list[SimGpu]) -> None:
        events, repeat = self.scenario.events, self.scenario.repeat_s
        elapsed = now - self._t0
        while True:
            start = self._cycle * repeat if repeat else 0.0
            end = start + repeat if repeat else float("inf")
            while self._next < len(events) and start + events[self._next].at_s <= elapsed:
                event = events[self._next]
                self._next += 1
                for index in range(len(gpus)) if event.gpus is None else event.gpus:
                    if index < len(gpus):
                        apply(event.actions, gpus[index], now)
            if elapsed < end:
                return
            # The script starts over; after a long pause, skip the cycles nobody saw.
            for gpu in gpus:
                reset(gpu)
            self._cycle = max(self._cycle + 1, int(elapsed // repeat) if repeat else 0)
            self._next = 0


def reset(gpu: SimGpu) -> None:
    gpu.lost = False
    gpu.overheat = False
    gpu.processes.clear()


def apply(actions: dict[str, Any], gpu: SimGpu, now: float) -> None:
    if "load" in actions:
        gpu.profile = _profile(actions, gpu, now)
    if "overheat" in actions:
        gpu.overheat = actions["overheat"]
    if "lost" in actions:
        gpu.lost = actions["lost"]
    if "xid" in actions:
        xid = int(actions["xid"])
        gpu.xids.record(gpu.index, xid, now)
        if xid in FATAL_XIDS:
            gpu.lost = True
    if "ecc" in actions:
        ecc = actions["ecc"]
        gpu.ecc_corrected += int(ecc.get("corrected", 0))
        gpu.ecc_uncorrected += int(ecc.get("uncorrected", 0))
        # An uncorrectable error retires the row it hit; correctable ones only in bulk.
        gpu.remapped_uncorrectable += int(ecc.get("uncorrected", 0))
        gpu.row_remap_failure = gpu.row_remap_failure or bool(ecc.get("row_remap_failure"))
    if "start_process" in actions:
        p = actions["start_process"]
        gpu.processes[int(p["pid"])] = SimProcess(
            pid=int(p["pid"]),
            user=str(p["user"]),
            command=str(p.get("command", "python")),
            memory_mib=int(p["memory_mib"]),
            uid=int(p.get("uid", 1000)),
            env=dict(p.get("env", {})),
        )
    if "stop_process" in actions:
        gpu.processes.pop(int(actions["stop_process"]), None)


def _profile(actions: dict[str, Any], gpu: SimGpu, now: float) -> LoadProfile:
    kind = actions["load"]
    memory = float(actions.get("memory_fraction", 0.5))
    if kind == "idle":
        return LoadProfile("idle", 0.5)
    if kind == "busy":
        return LoadProfile("busy", float(actions.get("util_pct", 90)), memory)
    if kind == "periodic":
        return LoadProfile(
            "periodic",
            float(actions.get("util_pct", 95)),
            memory,
            period_s=float(actions.get("period_s", 60)),
            duty=float(actions.get("duty", 0.5)),
            phase_s=-now,  # the first peak starts now, not at a random point of the period
        )
    return LoadProfile(
        "ramp",
        float(actions.get("to_pct", 100)),
        memory,
        ramp_from_pct=float(actions.get("from_pct", 0)),
        ramp_start=now,
        ramp_over_s=float(actions.get("over_s", 60)),
    )
