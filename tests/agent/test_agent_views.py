"""The portal view of the snapshot (``/v1/snapshot?view=portal``) from both kinds of node:
a real node's polling ``Collector`` and the simulator's ``LazyNode``, on the one server."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.collector import Collector
from agents.gpu_agent.desired import DesiredStateStore, parse_slices
from agents.gpu_agent.lazy import LazyNode
from agents.gpu_agent.model import (
    PORTAL_GPU_FIELDS,
    PORTAL_PROCESS_FIELDS,
    GpuReading,
    NodeSnapshot,
    ProcessReading,
)
from agents.gpu_agent.snapshot_views import UnknownView, requested_view
from tests.agent.conftest import REPO_ROOT

MODEL = "NVIDIA A100-SXM4-80GB"
NODE_KEYS = {
    "view", "agent", "hostname", "driver_version", "cuda_version", "collected_at",
    "collect_duration_s", "desired_generation", "gpus", "allocations", "violations",
}  # fmt: skip
BAD_VIEWS = ["view=compact", "view=", "view=PORTAL", "view=portal&view=full"]


class HandMadeBackend:
    """One node whose readings the test spells out: gaps, processes, a lost card."""

    name = "static"
    hostname = "static-01"

    def collect(self) -> NodeSnapshot:
        busy = GpuReading(
            index=0, uuid="GPU-busy", name=MODEL, pci_bus_id="00000000:07:00.0", serial="42",
            memory_total_mib=81920, memory_used_mib=4096, memory_free_mib=77000,
            utilization_gpu_pct=93, utilization_memory_pct=40, temperature_c=71,
            power_w=None,  # a card without a power reading
            power_limit_w=400.0, sm_clock_mhz=1410, energy_mj=123, pcie_tx_bytes_per_s=9,
            ecc_corrected_total=0, mig_mode="disabled",
            processes=[
                ProcessReading(pid=1, memory_used_mib=1024, user="alice", uid=1000,
                               command="python train.py", allocation_id="a-1",
                               attributed_by="owner"),
                ProcessReading(pid=2),  # nothing known but the pid
            ],
        )  # fmt: skip
        idle = GpuReading(index=1, uuid="GPU-idle", name=MODEL, processes=[])
        lost = GpuReading(index=2, uuid="GPU-lost", name=MODEL, serial="43", health="lost")
        return NodeSnapshot("static-01", time.time(), [busy, idle, lost], "550.54.15", "12.4")

    def close(self) -> None:
        pass


def documented_keys() -> dict[str, set[str]]:
    """The portal view's table in docs/agent.md: {level: keys}."""
    text = (REPO_ROOT / "docs" / "agent.md").read_text()
    section = text.split("## Portal view", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (node|`gpus\[\]`|`processes\[\]`) \| (.+) \|$", section, re.M)
    keys = {}
    for level, cells in rows:
        # `agent {version, ...}` names the key agent, `gpus[]` the key gpus; `"portal"` is a value.
        names = [k for k in re.findall(r"`([^`]+)`", cells) if not k.startswith('"')]
        keys[level.strip("`[]")] = {re.split(r"[ \[{]", k)[0] for k in names}
    return keys


def reduced_process(process: dict[str, Any]) -> dict[str, Any]:
    return {k: process[k] for k in PORTAL_PROCESS_FIELDS if k in process}


def assert_portal_view_of(portal: dict[str, Any], full: dict[str, Any]) -> None:
    """``portal`` holds exactly the documented keys, with ``full``'s values."""
    assert portal["view"] == "portal"
    assert set(portal) == {k for k in NODE_KEYS if k in full or k == "view"}
    for key in NODE_KEYS - {"view", "gpus", "allocations", "violations"}:
        assert portal.get(key) == full.get(key), key
    assert len(portal["gpus"]) == len(full["gpus"])
    for small, whole in zip(portal["gpus"], full["gpus"], strict=True):
        expected = {k: whole[k] for k in PORTAL_GPU_FIELDS if k in whole}
        if "processes" in whole:
            expected["processes"] = [reduced_process(p) for p in whole["processes"]]
        assert small == expected


def test_the_field_lists_are_the_documented_ones_and_exist_on_the_readings() -> None:
    documented = documented_keys()
    assert documented["node"] == NODE_KEYS
    assert documented["gpus"] == set(PORTAL_GPU_FIELDS)
    assert documented["processes"] == set(PORTAL_PROCESS_FIELDS)
    # The reading schema's fields are all reported by this agent.
    assert set(PORTAL_GPU_FIELDS) <= set(vars(GpuReading(index=0)))
    assert set(PORTAL_PROCESS_FIELDS) <= set(vars(ProcessReading(pid=1)))


def test_the_portal_view_keeps_gaps_reduces_processes_and_carries_the_slices_report(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = Collector(HandMadeBackend(), 1.0)  # type: ignore[arg-type]
    slice_ = {"allocation_id": "a-1", "gpu_uuid": "GPU-busy", "compute_pct": 50,
              "memory_mib": 2048, "owner": "alice"}  # fmt: skip
    collector.desired.replace(parse_slices({"slices": [slice_]}))
    collector.collect_once()
    url = serve(collector, "T")
    full = get(f"{url}/v1/snapshot", token="T").json()
    result = get(f"{url}/v1/snapshot?view=portal", token="T")
    assert result.status == 200
    assert result.headers["Content-Type"] == "application/json"
    assert result.headers["Cache-Control"] == "no-store"
    portal = result.json()
    assert portal["allocations"] == full["allocations"]
    assert portal["violations"] == full["violations"]
    assert portal["desired_generation"] == full["desired_generation"] == 1
    busy, idle, lost = portal["gpus"]
    assert "power_w" not in busy  # absent stays absent
    assert busy["processes"] == [{"user": "alice", "memory_used_mib": 1024}, {}]
    assert idle == {"index": 1, "uuid": "GPU-idle", "name": MODEL, "health": "ok",
                    "processes": []}  # fmt: skip
    assert lost == {"index": 2, "uuid": "GPU-lost", "name": MODEL, "serial": "43",
                    "health": "lost"}  # fmt: skip
    assert_portal_view_of(portal, full)


def test_a_collector_node_serves_the_view_of_its_published_collection(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = Collector(SimulatedBackend("unit", 8, MODEL, seed=3), 1.0)
    published = collector.collect_once()
    url = serve(collector, "T")
    full = get(f"{url}/v1/snapshot", token="T")
    portal = get(f"{url}/v1/snapshot?view=portal", token="T")
    # The full snapshot is what it was before views existed, byte for byte.
    assert full.body == json.dumps(published.snapshot.to_dict(), separators=(",", ":")).encode()
    assert get(f"{url}/v1/snapshot?view=full", token="T").body == full.body
    assert get(f"{url}/v1/snapshot?pretty=1", token="T").body == full.body
    assert portal.body == published.views["portal"]
    assert b": " not in portal.body
    assert len(portal.body) < len(full.body) / 2
    assert any(g.get("processes") for g in portal.json()["gpus"])  # the sim runs jobs
    assert_portal_view_of(portal.json(), full.json())


def test_a_collector_node_checks_the_token_then_the_view(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = Collector(SimulatedBackend("unit", 1, MODEL, seed=1), 1.0)
    url = serve(collector, "T")
    assert get(f"{url}/v1/snapshot?view=portal").status == 401
    assert get(f"{url}/v1/snapshot?view=nope", token="wrong").status == 401
    # Before the first collection a valid view waits like the full snapshot, a bad one is 400.
    assert get(f"{url}/v1/snapshot?view=portal", token="T").status == 503
    assert get(f"{url}/v1/snapshot?view=nope", token="T").status == 400
    collector.collect_once()
    for query in BAD_VIEWS:
        result = get(f"{url}/v1/snapshot?{query}", token="T")
        assert result.status == 400, query
        assert result.headers["Content-Type"] == "application/json"
        assert "view" in result.json()["error"], query


def test_unknown_views_name_the_known_ones() -> None:
    assert requested_view("") == "full"
    assert requested_view("pretty=1") == "full"
    assert requested_view("view=portal&pretty=1") == "portal"
    with pytest.raises(UnknownView, match="'compact'; known views: full, portal"):
        requested_view("view=compact")


def test_a_lazy_node_encodes_each_view_once_per_tick() -> None:
    backend = SimulatedBackend("lazy-01", 2, MODEL, seed=1)
    node = LazyNode(backend, 3600, DesiredStateStore(None))
    portal = node.snapshot_json("portal")
    assert portal is not None
    assert node.snapshot_json("portal") is portal
    full = node.snapshot_json()
    assert node.snapshot_json("full") is full
    assert full is not None
    assert_portal_view_of(json.loads(portal), json.loads(full))
    node.invalidate()
    assert node.snapshot_json("portal") != portal


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _exchange(
    connection: http.client.HTTPConnection, path: str, authorized: bool = True
) -> tuple[int, bytes]:
    headers = {"Authorization": "Bearer T"} if authorized else {}
    connection.request("GET", path, headers=headers)
    response = connection.getresponse()
    body = response.read()
    assert response.getheader("Connection") is None, path  # the server keeps it open
    return response.status, body


def _check_keep_alive(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        status, full = _exchange(connection, "/v1/snapshot")
        assert status == 200
        sock = connection.sock
        answers = [
            _exchange(connection, "/v1/snapshot?view=portal"),
            _exchange(connection, "/v1/snapshot?view=nope"),
            _exchange(connection, "/v1/snapshot?view=portal", authorized=False),
            _exchange(connection, "/v1/snapshot"),
            _exchange(connection, "/v1/snapshot?view=portal"),
        ]
        assert [status for status, _ in answers] == [200, 400, 401, 200, 200]
        # Still the first socket: http.client would have reconnected silently otherwise.
        assert connection.sock is sock
        assert answers[3][1] == full and answers[4][1] == answers[0][1]
        assert_portal_view_of(json.loads(answers[0][1]), json.loads(full))
    finally:
        connection.close()


def test_keep_alive_carries_both_kinds_of_snapshot_request_for_either_kind_of_node(
    start_agent: Callable[..., Any], serve: Callable[..., str]
) -> None:
    collector = Collector(SimulatedBackend("polled", 2, MODEL, seed=1), 1.0)
    collector.collect_once()
    _check_keep_alive(_port(serve(collector, "T")))
    # One hour per tick: every request of the test reads the same collection.
    agent = start_agent("--backend", "sim", "--gpus", "4", "--token", "T", "--interval", "3600")
    _check_keep_alive(_port(agent.urls[0]))


def test_a_simulated_node_serves_the_view_with_a_collector_nodes_answers(
    start_agent: Callable[..., Any], serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    agent = start_agent(
        "--backend", "sim", "--nodes", "2", "--gpus", "8", "--token", "T", "--interval", "3600",
        nodes=2,
    )  # fmt: skip
    url = agent.urls[1]
    portal = get(f"{url}/v1/snapshot?view=portal", token="T")
    full = get(f"{url}/v1/snapshot", token="T")
    assert portal.status == 200 and portal.json()["hostname"] == agent.nodes[1]
    assert_portal_view_of(portal.json(), full.json())
    assert get(f"{url}/v1/snapshot?view=full", token="T").body == full.body

    collector = Collector(SimulatedBackend("ref-01", 8, MODEL, seed=1), 1.0)
    collector.collect_once()
    reference = serve(collector, "T")
    requests = [("view=portal", None), ("view=portal", "T"), *[(q, "T") for q in BAD_VIEWS]]
    for query, token in requests:
        lazy = get(f"{url}/v1/snapshot?{query}", token=token)
        polled = get(f"{reference}/v1/snapshot?{query}", token=token)
        assert lazy.status == polled.status, query
        assert lazy.headers.keys() == polled.headers.keys(), query
        if lazy.status != 200:
            assert lazy.body == polled.body, query
