"""A simulated node the portal manages runs its slices' jobs, as their owners, and nothing
else; an idle owner's slice holds nothing; the replay of a fleet's past is the same fleet."""

from __future__ import annotations

import pytest

from agents.gpu_agent import __version__
from agents.gpu_agent.backends.scenario import parse_scenario
from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.backends.sim_gpu import _USERS
from agents.gpu_agent.backends.sim_jobs import job_for
from agents.gpu_agent.cli import build_parser, main, make_backends
from agents.gpu_agent.collector import collect_snapshot
from agents.gpu_agent.desired import DesiredStateStore, Slice
from agents.gpu_agent.model import AgentInfo, NodeSnapshot
from agents.gpu_agent.replay import portal_views
from tests.agent.test_agent_sim import FakeClock

AGENT = AgentInfo(__version__, "sim", 1.0)
L40S = "NVIDIA L40S"


def _node(gpus: int = 4, **kwargs) -> tuple[SimulatedBackend, FakeClock, DesiredStateStore]:
    clock = FakeClock()
    return SimulatedBackend("n", gpus, L40S, 3, clock, **kwargs), clock, DesiredStateStore(None)


def _collect(backend, clock, store, seconds: int = 60) -> NodeSnapshot:
    for _ in range(seconds):
        clock.now += 1.0
        snapshot = collect_snapshot(backend, AGENT, store)
    return snapshot


def test_a_managed_node_runs_one_job_per_slice_as_its_owner_and_nothing_else() -> None:
    backend, clock, store = _node()
    before = _collect(backend, clock, store)
    assert {p.user for g in before.gpus for p in g.processes} <= set(_USERS)
    assert any(g.processes for g in before.gpus), "no made-up job to stop"
    a, b = before.gpus[0].uuid, before.gpus[1].uuid
    store.replace([Slice("alloc-1", a, 50, 20_000, "ana"), Slice("alloc-2", a, 25, 8_000, "ben"),
                   Slice("alloc-3", b, 100, 46_068, "ana")])  # fmt: skip
    after = _collect(backend, clock, store)
    by_card = {g.uuid: g for g in after.gpus}
    assert sorted(p.user for p in by_card[a].processes) == ["ana", "ben"]
    assert {(p.allocation_id, p.attributed_by) for g in after.gpus for p in g.processes} == {
        ("alloc-1", "environment"), ("alloc-2", "environment"), ("alloc-3", "environment")
    }  # fmt: skip
    assert after.violations == []
    usage = {u.allocation_id: u for u in after.allocations}
    for allocation_id, limit in (("alloc-1", 20_000), ("alloc-2", 8_000), ("alloc-3", 46_068)):
        assert usage[allocation_id].process_count == 1
        assert 0.45 * limit <= usage[allocation_id].memory_used_mib <= 0.85 * limit
    # The cards without a slice run nothing now, and go quiet.
    for gpu in after.gpus[2:]:
        assert gpu.processes == [] and gpu.utilization_gpu_pct <= 3
        assert gpu.memory_used_mib <= 2
    assert by_card[a].utilization_gpu_pct >= 20 or by_card[b].utilization_gpu_pct >= 20


def test_an_empty_desired_state_stops_the_made_up_users_at_once() -> None:
    backend, clock, store = _node()
    _collect(backend, clock, store)
    store.replace([])
    snapshot = _collect(backend, clock, store, seconds=1)
    assert [g.processes for g in snapshot.gpus] == [[]] * 4
    assert all(g.memory_used_mib <= 2 for g in snapshot.gpus)  # freed when they ended


def test_an_idle_owners_slice_holds_nothing_and_is_reported_unused() -> None:
    backend, clock, store = _node(idle_owners=["mei"])
    uuid = _collect(backend, clock, store, seconds=1).gpus[0].uuid
    store.replace([Slice("alloc-7", uuid, 30, 8192, "mei")])
    snapshot = _collect(backend, clock, store)
    [usage] = snapshot.allocations
    assert (usage.process_count, usage.memory_used_mib) == (0, 0)
    assert snapshot.gpus[0].processes == [] and snapshot.gpus[0].utilization_gpu_pct <= 3


def test_a_slice_runs_the_same_job_for_a_seed_and_another_for_another_allocation() -> None:
    one = Slice("alloc-1", "GPU-1", 50, 20_000, "ana")
    assert job_for(one, 3) == job_for(one, 3)
    assert job_for(one, 3) != job_for(Slice("alloc-2", "GPU-1", 50, 20_000, "ana"), 3)
    assert job_for(one, 3).env.items() >= one.launch_env().items()  # as the settings say
    assert 0.6 * 50 <= job_for(one, 3).load.target_util_pct <= 0.95 * 50


def test_slices_oversubscribing_a_card_use_at_most_what_it_has() -> None:
    backend, clock, store = _node(gpus=1)
    uuid = _collect(backend, clock, store, seconds=1).gpus[0].uuid
    # Memory oversubscribed 1.5 times: the jobs together hold under the card's memory.
    store.replace([Slice(f"alloc-{i}", uuid, 30, 23_000, f"u{i}") for i in range(3)])
    gpu = _collect(backend, clock, store).gpus[0]
    assert len(gpu.processes) == 3
    assert sum(p.memory_used_mib for p in gpu.processes) <= 0.9 * 46_068
    assert gpu.memory_used_mib <= gpu.memory_total_mib


def test_a_scripted_node_runs_its_script_whatever_it_holds() -> None:
    scenario = parse_scenario({"events": [{"at_s": 0, "gpu": "all", "load": "busy",
                                           "util_pct": 70}]})  # fmt: skip
    backend, clock, store = _node(gpus=2, scenario=scenario, idle_owners=["ana"])
    uuid = _collect(backend, clock, store, seconds=1).gpus[0].uuid
    store.replace([Slice("alloc-1", uuid, 50, 8192, "ben")])
    snapshot = _collect(backend, clock, store)
    assert [g.processes for g in snapshot.gpus] == [[], []]
    assert all(g.utilization_gpu_pct >= 50 for g in snapshot.gpus)


def test_idle_owners_are_a_simulator_option(capsys) -> None:
    args = build_parser().parse_args(
        ["--backend", "sim", "--gpus", "1", "--idle-owner", "mei", "--idle-owner", "li"]
    )
    assert make_backends(args)[0]._idle_owners == {"mei", "li"}
    with pytest.raises(SystemExit) as exited:
        main(["--backend", "nvml", "--no-auth", "--idle-owner", "mei"])
    assert exited.value.code == 2
    assert "--idle-owner only apply to --backend sim" in capsys.readouterr().err


# --- the replay of a fleet's past ------------------------------------------------------------

ARGV = ["--backend", "sim", "--nodes", "2", "--gpus", "2", "--hostname", "demo",
        "--model", L40S, "--idle-owner", "mei"]  # fmt: skip
START = 1_764_000_000.0


def test_the_replay_is_the_fleet_the_same_command_line_starts(start_agent, get) -> None:
    agent = start_agent(*ARGV, "--no-auth", nodes=2)
    live = [[g["uuid"] for g in get(f"{url}/v1/snapshot").json()["gpus"]] for url in agent.urls]
    [(moment, views)] = list(portal_views(ARGV, START, START + 60, lambda t: {}))
    assert moment == START
    assert [[g["uuid"] for g in views[host]["gpus"]] for host in ("demo-01", "demo-02")] == live
    assert views["demo-01"]["view"] == "portal"


def test_the_replay_gives_each_moment_the_slices_held_then() -> None:
    uuid = next(portal_views(ARGV, START, START + 1, lambda t: {}))[1]["demo-02"]["gpus"][1]["uuid"]
    held = [Slice("alloc-5", uuid, 50, 8192, "ana"), Slice("alloc-6", uuid, 30, 8192, "mei")]

    def slices_at(t: float) -> dict:
        return {"demo-02": held} if t >= START + 600 else {}

    wanted = {START + 300, START + 1200}
    out = dict(portal_views(ARGV, START, START + 1800, slices_at, step_s=10, wanted=wanted))
    assert sorted(out) == sorted(wanted)
    before, after = out[START + 300]["demo-02"], out[START + 1200]["demo-02"]
    assert before["allocations"] == [] and before["gpus"][1]["processes"] == []
    [job] = after["gpus"][1]["processes"]  # ana's; mei is idle
    assert job == {"user": "ana", "memory_used_mib": after["allocations"][0]["memory_used_mib"]}
    assert [a["process_count"] for a in after["allocations"]] == [1, 0]
    assert after["violations"] == []


def test_only_a_simulator_has_a_past() -> None:
    with pytest.raises(ValueError, match="--backend sim"):
        next(portal_views(["--backend", "nvml"], START, START + 60, lambda t: {}))
