"""HTTP behaviour of one node's server, in-process so each edge case costs milliseconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.collector import Collector
from agents.gpu_agent.model import GpuReading, NodeSnapshot


def sim_collector(interval: float = 1.0, gpus: int = 2) -> Collector:
    return Collector(SimulatedBackend("unit", gpus, "NVIDIA A10", seed=1), interval)


def test_everything_is_503_until_the_first_collection(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = sim_collector()
    url = serve(collector, "T")
    assert get(f"{url}/v1/snapshot", token="T").status == 503
    assert get(f"{url}/metrics").status == 503
    health = get(f"{url}/healthz")
    assert (health.status, health.json()["status"]) == (503, "starting")

    collector.collect_once()
    assert get(f"{url}/v1/snapshot", token="T").status == 200
    assert get(f"{url}/metrics").status == 200
    assert get(f"{url}/healthz").status == 200


def test_token_is_checked_before_anything_else(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    url = serve(sim_collector(), "T")  # never collected: a valid token would get 503
    result = get(f"{url}/v1/snapshot", token="nope")
    assert result.status == 401
    assert result.headers["WWW-Authenticate"].startswith("Bearer")


def test_only_the_bearer_scheme_is_accepted(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = sim_collector()
    collector.collect_once()
    url = serve(collector, "s3cret")
    for header, expected in [
        ("Bearer s3cret", 200),
        ("bearer s3cret", 200),
        ("Basic s3cret", 401),
        ("s3cret", 401),
        ("Bearer s3cret-and-more", 401),
        ("Bearer sécret", 401),
    ]:
        result = get(f"{url}/v1/snapshot", headers={"Authorization": header})
        assert result.status == expected, header


def test_no_auth_mode_serves_the_snapshot_to_anyone(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = sim_collector()
    collector.collect_once()
    url = serve(collector, None)
    assert get(f"{url}/v1/snapshot").json()["hostname"] == "unit"


def test_healthz_turns_503_when_collections_stop(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = sim_collector(interval=0.01)
    collector.collect_once()
    url = serve(collector, "T")
    time.sleep(0.08)  # more than five 10 ms intervals
    health = get(f"{url}/healthz")
    assert health.status == 503
    assert health.json()["status"] == "stale"
    assert health.json()["last_collect_age_s"] >= 0.05


def test_unknown_paths_are_404_and_writes_are_405(
    serve: Callable[..., str], get: Callable[..., Any]
) -> None:
    collector = sim_collector()
    collector.collect_once()
    url = serve(collector, "T")
    assert get(f"{url}/", token="T").status == 404
    assert get(f"{url}/v1/snapshot/", token="T").status == 404
    assert get(f"{url}/v1/snapshot?pretty=1", token="T").status == 200
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        result = get(f"{url}/v1/snapshot", token="T", method=method)
        assert result.status == 405, method
        assert result.json() == {"error": f"method {method} not allowed"}


class FlakyBackend:
    name = "flaky"
    hostname = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> NodeSnapshot:
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("driver went away")
        return NodeSnapshot("flaky", time.time(), [GpuReading(index=0, uuid="GPU-x")])

    def close(self) -> None:
        pass


def test_a_failing_backend_leaves_the_last_good_snapshot_in_place() -> None:
    backend = FlakyBackend()
    collector = Collector(backend, 0.02)
    collector.start()
    try:
        assert collector.wait_first(5)
        first = collector.published
        time.sleep(0.15)
        assert backend.calls > 2
        assert collector.published is first
    finally:
        collector.stop()


def test_collector_stamps_agent_info_and_duration() -> None:
    published = sim_collector(interval=2.5).collect_once()
    body = published.snapshot.to_dict()
    assert body["agent"] == {"version": "0.1.0", "backend": "sim", "interval_s": 2.5}
    assert 0 <= body["collect_duration_s"] < 1
    assert published.snapshot_json.startswith(b'{"agent":{"version":"0.1.0"')
    assert b": " not in published.snapshot_json  # compact separators


def test_unsupported_fields_are_omitted_not_zeroed() -> None:
    reading = GpuReading(index=3, uuid="GPU-1", power_w=None, temperature_c=0)
    assert reading.to_dict() == {"index": 3, "uuid": "GPU-1", "temperature_c": 0, "health": "ok"}
    snapshot = NodeSnapshot("h", 1.5, [reading])
    assert "driver_version" not in snapshot.to_dict()
    assert "agent" not in snapshot.to_dict()
