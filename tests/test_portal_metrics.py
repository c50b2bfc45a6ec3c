"""The portal's own /metrics, read by a real Prometheus parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.models import Node
from telemetry import services
from telemetry.poller import PollResult
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def _families(client) -> dict[str, list]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {
        f.name: [(s.name, s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(response.content.decode())
    }


@pytest.fixture
def fleet(settings):
    settings.METRICS_NODE_LABELS = ["rack"]
    a = NodeFactory(name="a", labels={"rack": "r1"})
    b = NodeFactory(name="b", labels={"rack": "r2"})
    card = {"name": "NVIDIA H100", "memory_total_mib": 80000, "health": "ok"}
    services.record_poll_results([
        PollResult(a.pk, {"gpus": [
            {**card, "uuid": "G1", "index": 0, "utilization_gpu_pct": 20, "memory_used_mib": 100},
            {**card, "uuid": "G2", "index": 1, "utilization_gpu_pct": 60, "memory_used_mib": 300},
        ]}, "", 0.1),
        PollResult(b.pk, None, "connection refused", 0.1),
    ])  # fmt: skip


def test_fleet_gauges_count_nodes_and_cards_and_aggregate_use_by_label(client, fleet):
    families = _families(client)
    nodes = {s[1]["state"]: s[2] for s in families["gpuportal_nodes"]}
    assert nodes == {"online": 1, "offline": 1}
    assert families["gpuportal_gpus"] == [
        ("gpuportal_gpus", {"model": "NVIDIA H100", "health": "ok"}, 2)
    ]
    [util] = families["gpuportal_gpu_utilization_percent"]
    assert util[1] == {"model": "NVIDIA H100", "rack": "r1"} and util[2] == 40
    [used] = families["gpuportal_gpu_memory_used_mib"]
    assert used[2] == 400


def test_poll_counters_grow_with_each_cycle(client, db, sim_agents):
    agents = sim_agents(nodes=1)
    Node.objects.create(name="live", agent_url=agents.urls[0], agent_token=agents.token)
    Node.objects.create(name="dead", agent_url="http://127.0.0.1:9")
    services.poll_fleet()
    families = _families(client)
    assert families["gpuportal_agent_polls"][0][2] == 2
    assert families["gpuportal_agent_poll_failures"][0][2] == 1
    assert families["gpuportal_poll_chunk_duration_seconds"][0][2] > 0


def test_a_configured_token_is_required(client, settings, fleet):
    settings.PORTAL_METRICS_TOKEN = "scrape-secret"
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert ok.status_code == 200 and b"gpuportal_nodes" in ok.content
