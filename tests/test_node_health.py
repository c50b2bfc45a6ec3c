"""Node health with real agent processes: one goes away and comes back."""

from __future__ import annotations

import pytest

from agents.choices import NodeState
from agents.models import GPU, Node
from telemetry import services
from tests import procs
from tests.conftest import AGENT_TOKEN

pytestmark = pytest.mark.django_db


def _start_agent(port: int) -> procs.Proc:
    agent = procs.start(
        "agent",
        [procs.PYTHON, "-m", "agents.gpu_agent", "--backend", "sim", "--gpus", "2",
         "--hostname", "flaky", "--listen", f"127.0.0.1:{port}", "--interval", "0.2"],
        procs.child_env(GPU_AGENT_TOKEN=AGENT_TOKEN),
    )  # fmt: skip
    agent.wait_for("gpu-agent listening on")
    return agent


def test_an_agent_that_goes_away_and_comes_back(settings):
    settings.NODE_OFFLINE_AFTER_MISSES = 2
    port = procs.free_port()
    node = Node.objects.create(
        name="flaky", agent_url=f"http://127.0.0.1:{port}", agent_token=AGENT_TOKEN
    )
    agent = _start_agent(port)
    try:
        services.poll_fleet()
        node.refresh_from_db()
        assert node.state == NodeState.ONLINE
        seen_at = node.last_seen
        assert agent.stop() == 0

        states = []
        for _ in range(2):
            services.poll_fleet()
            node.refresh_from_db()
            states.append(node.state)
        assert states == [NodeState.ONLINE, NodeState.OFFLINE]
        # Nothing is deleted, and the last-seen time is the last answer's.
        assert node.last_seen == seen_at and node.last_error
        assert GPU.objects.filter(node=node).count() == 2

        agent = _start_agent(port)
        services.poll_fleet()
        node.refresh_from_db()
        assert (node.state, node.missed_polls, node.last_error) == (NodeState.ONLINE, 0, "")
        assert node.last_seen > seen_at
    finally:
        agent.stop()
