"""The poll task on a real Celery worker, with Redis as broker and real agents."""

from __future__ import annotations

import pytest

from agents.choices import NodeState
from agents.models import GPU, Node
from telemetry.tasks import poll_agents
from tests import procs


@pytest.fixture
def celery_worker(transactional_db, child_env_for_test_db):
    worker = procs.start_celery_worker(child_env_for_test_db, "test-poller")
    yield worker
    worker.stop()


def test_poll_task_on_a_worker_records_every_agents_gpus(celery_worker, sim_agents):
    agents = sim_agents(nodes=2, gpus=4)
    for i, url in enumerate(agents.urls):
        Node.objects.create(name=f"node-{i}", agent_url=url, agent_token=agents.token)
    Node.objects.create(name="broken", agent_url=f"http://127.0.0.1:{procs.free_port()}")

    summary = poll_agents.delay().get(timeout=60)

    assert summary["polled"] == 3
    assert summary["answered"] == 2
    assert summary["gpus_seen"] == 8
    assert set(summary["failed"]) == {str(Node.objects.get(name="broken").pk)}
    assert GPU.objects.count() == 8
    assert set(Node.objects.values_list("state", flat=True)) == {
        NodeState.ONLINE,
        NodeState.OFFLINE,
    }
    assert any("poll_agents" in line and "succeeded" in line for line in celery_worker.lines)
