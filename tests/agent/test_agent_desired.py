"""Desired slices: checked, kept across restarts, served with launch settings, and used
to attribute processes to allocations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents.gpu_agent.attribution import attribute
from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.collector import Collector
from agents.gpu_agent.desired import Slice
from agents.gpu_agent.model import GpuReading, MigDevice, ProcessReading
from tests.agent.conftest import HttpResult, http_get

A, B = "GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"


def put(
    url: str,
    body: Any,
    token: str | None = "T",  # noqa: S107
    content_type: str = "application/json",
) -> HttpResult:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http_get(
        url, token or None, method="PUT", headers={"Content-Type": content_type}, data=data
    )


def slice_(allocation_id: str, gpu: str, owner: str = "alice", memory: int = 8192) -> dict:
    return {
        "allocation_id": allocation_id,
        "gpu_uuid": gpu,
        "compute_pct": 30,
        "memory_mib": memory,
        "owner": owner,
    }


def proc(pid: int, user: str | None, mib: int, env: str | None = None) -> ProcessReading:
    return ProcessReading(pid=pid, memory_used_mib=mib, user=user, allocation_env=env)


def test_launch_settings_carry_the_device_and_the_three_kinds_of_limits() -> None:
    env = Slice("a-17", A, 30, 8192, "alice").launch_env()
    assert env == {
        "CUDA_VISIBLE_DEVICES": A,
        "NVIDIA_GPU_MEMORY_LIMIT": "8192",
        "CUDA_DEVICE_MEMORY_LIMIT": "8192m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M",
        "GPU_PORTAL_ALLOCATION": "a-17",
    }


def test_processes_are_attributed_by_environment_then_owner_else_reported() -> None:
    slices = [
        Slice("a-1", A, 50, 10000, "alice"),
        Slice("a-2", A, 50, 10000, "bob"),
        Slice("b-1", B, 100, 20000, "carol"),
    ]
    gpus = [
        GpuReading(
            index=0,
            uuid=A,
            processes=[
                proc(1, "alice", 4000),  # owner match
                proc(2, "root", 3000, env="a-2"),  # the variable beats the owner
                proc(3, "mallory", 500),  # nobody's
                proc(4, "bob", 500, env="b-1"),  # an allocation of another card
            ],
        ),
        GpuReading(index=1, uuid=B, processes=[proc(5, "carol", 25000)]),
    ]
    usage, violations = attribute(gpus, slices)
    by_pid = {p.pid: p for g in gpus for p in g.processes or ()}
    assert (by_pid[1].allocation_id, by_pid[1].attributed_by) == ("a-1", "owner")
    assert (by_pid[2].allocation_id, by_pid[2].attributed_by) == ("a-2", "environment")
    assert by_pid[3].allocation_id is None
    assert by_pid[4].allocation_id == "b-1"
    assert {u.allocation_id: (u.process_count, u.memory_used_mib) for u in usage} == {
        "a-1": (1, 4000),
        "a-2": (1, 3000),
        "b-1": (2, 25500),
    }
    assert sorted((v.kind, tuple(v.pids)) for v in violations) == [
        ("over_memory", (4, 5)),
        ("unallocated", (3,)),
        ("wrong_gpu", (4,)),
    ]
    over = next(v for v in violations if v.kind == "over_memory")
    assert (over.allocation_id, over.memory_used_mib, over.memory_limit_mib) == (
        "b-1",
        25500,
        20000,
    )


def test_a_slice_on_a_mig_device_attributes_processes_of_its_card() -> None:
    gpu = GpuReading(
        index=0,
        uuid=A,
        mig_devices=[MigDevice(index=0, uuid="MIG-1111")],
        processes=[proc(7, "alice", 100)],
    )
    usage, violations = attribute([gpu], [Slice("m-1", "MIG-1111", 100, 5000, "alice")])
    assert violations == []
    assert usage[0].process_count == 1


@pytest.fixture
def agent_url(serve: Any) -> tuple[str, Collector]:
    collector = Collector(SimulatedBackend("d-01", 2, "NVIDIA A100-SXM4-80GB", seed=3), 1.0)
    collector.collect_once()
    return serve(collector, "T"), collector


def test_put_desired_state_is_served_back_with_launch_settings_and_attributes(
    agent_url: tuple[str, Collector], get: Any
) -> None:
    url, collector = agent_url
    uuids = [g.uuid for g in collector.published.snapshot.gpus]  # type: ignore[union-attr]
    result = put(f"{url}/v1/desired-state", {"slices": [slice_("a-1", uuids[0])]})
    assert result.status == 200, result.body
    assert result.json()["generation"] == 1
    served = get(f"{url}/v1/desired-state", token="T").json()
    [entry] = served["slices"]
    assert entry["allocation_id"] == "a-1"
    assert entry["launch_env"]["CUDA_VISIBLE_DEVICES"] == uuids[0]
    collector.collect_once()
    snapshot = get(f"{url}/v1/snapshot", token="T").json()
    assert [a["allocation_id"] for a in snapshot["allocations"]] == ["a-1"]
    assert "violations" in snapshot
    metrics = get(f"{url}/metrics").body.decode()
    assert 'gpu_agent_allocation_memory_limit_mib{allocation="a-1"' in metrics
    # The card holding exactly one slice carries its allocation label on DCGM series too.
    assert f'UUID="{uuids[0]}"' in metrics and 'allocation="a-1"}' in metrics


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "invalid JSON"),
        ({"slices": "all"}, 422, "expected a list"),
        ({"slices": [{"allocation_id": "a"}]}, 422, "missing"),
        ({"slices": [slice_("a", A) | {"compute_pct": 0}]}, 422, "outside 1..100"),
        ({"slices": [slice_("a", A) | {"memory_mib": "lots"}]}, 422, "expected an integer"),
        ({"slices": [slice_("a", "GPU-not-on-this-node")]}, 422, "not a card on this node"),
        ({"slices": [slice_("a", "nvidia0")]}, 422, "GPU or MIG UUID"),
        ({"slices": [slice_("a b", "GPU-x")]}, 422, "allocation_id"),
        ({"slices": [], "extra": 1}, 422, "expected"),
    ],
)
def test_invalid_desired_state_is_refused_and_changes_nothing(
    agent_url: tuple[str, Collector], get: Any, body: Any, status: int, message: str
) -> None:
    url, collector = agent_url
    uuid = collector.published.snapshot.gpus[0].uuid  # type: ignore[union-attr]
    assert put(f"{url}/v1/desired-state", {"slices": [slice_("keep", uuid)]}).status == 200
    # Slices naming A name this node's first card, so only the error under test remains.
    if not isinstance(body, bytes):
        body = json.loads(json.dumps(body).replace(A, uuid))
    result = put(f"{url}/v1/desired-state", body)
    assert result.status == status
    assert message in result.json()["error"]
    served = get(f"{url}/v1/desired-state", token="T").json()
    assert [s["allocation_id"] for s in served["slices"]] == ["keep"]
    assert served["generation"] == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested"),
        (b'{"slices": [{"memory_mib": ' + b"9" * 5000 + b"}]}", "integer"),
        (b'{"slices": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested"),
    ],
    ids=["deep-list", "huge-int", "deep-inside"],
)
def test_deeply_nested_or_huge_integer_json_is_a_400_with_a_json_error(
    agent_url: tuple[str, Collector], get: Any, body: bytes, message: str
) -> None:
    url, collector = agent_url
    uuid = collector.published.snapshot.gpus[0].uuid  # type: ignore[union-attr]
    assert put(f"{url}/v1/desired-state", {"slices": [slice_("keep", uuid)]}).status == 200
    result = put(f"{url}/v1/desired-state", body)
    assert result.status == 400, result.body
    assert message in result.json()["error"]
    served = get(f"{url}/v1/desired-state", token="T").json()
    assert [s["allocation_id"] for s in served["slices"]] == ["keep"]


def test_duplicate_allocations_are_refused(agent_url: tuple[str, Collector]) -> None:
    url, collector = agent_url
    uuid = collector.published.snapshot.gpus[0].uuid  # type: ignore[union-attr]
    result = put(f"{url}/v1/desired-state", {"slices": [slice_("a", uuid), slice_("a", uuid)]})
    assert result.status == 422
    assert "appears twice" in result.json()["error"]


def test_desired_state_needs_the_token_and_json(agent_url: tuple[str, Collector], get: Any) -> None:
    url, _ = agent_url
    assert put(f"{url}/v1/desired-state", {"slices": []}, token=None).status == 401
    assert put(f"{url}/v1/desired-state", {"slices": []}, token="wrong").status == 401
    assert get(f"{url}/v1/desired-state").status == 401
    assert put(f"{url}/v1/desired-state", b"{}", content_type="text/plain").status == 415
    assert put(f"{url}/v1/snapshot", {"slices": []}).status == 405


def test_desired_state_survives_a_restart(tmp_path: Path, start_agent: Any, get: Any) -> None:
    args = ("--backend", "sim", "--gpus", "2", "--token", "T", "--state-dir", str(tmp_path))
    first = start_agent(*args, "--hostname", "keep-01")
    uuid = get(f"{first.urls[0]}/v1/snapshot", token="T").json()["gpus"][1]["uuid"]
    assert put(f"{first.urls[0]}/v1/desired-state", {"slices": [slice_("a-9", uuid)]}).status == 200
    first.proc.terminate()
    first.proc.wait(10)
    assert (tmp_path / "desired-state-keep-01.json").exists()
    second = start_agent(*args, "--hostname", "keep-01")
    served = get(f"{second.urls[0]}/v1/desired-state", token="T").json()
    assert [s["allocation_id"] for s in served["slices"]] == ["a-9"]
    assert served["generation"] == 1
