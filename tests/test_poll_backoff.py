"""Offline nodes are polled less often, and come back as soon as they answer."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents import registration
from agents.choices import NodeState
from agents.models import Node
from telemetry import services
from telemetry.poller import PollResult
from tests import procs
from tests.test_fleet_services import gpu, snapshot


@pytest.fixture
def backoff(settings):
    settings.NODE_OFFLINE_AFTER_MISSES = 2
    settings.GPU_POLL_INTERVAL = 5.0
    settings.GPU_POLL_BACKOFF_MAX = 30.0
    return settings


def _fail(node: Node, now) -> Node:
    services.record_poll_results([PollResult(node.pk, None, "connection refused", 0.01)], now=now)
    node.refresh_from_db()
    return node


def test_backoff_doubles_after_going_offline_and_is_capped(backoff):
    assert [services.backoff_s(m) for m in range(7)] == [0, 0, 0, 10, 20, 30, 30]


def test_an_offline_node_waits_longer_between_polls_until_it_answers(db, backoff):
    node = Node.objects.create(name="n", agent_url="http://127.0.0.1:9", agent_token="t")
    now = timezone.now()
    # Misses up to going offline: still polled every cycle.
    for _ in range(2):
        assert _fail(node, now).poll_after is None
    assert node.state == NodeState.OFFLINE
    # The third miss: not before 10 s, then 20 s, then at most 30 s.
    for wait in (10, 20, 30, 30):
        node = _fail(node, now)
        assert node.poll_after == now + timedelta(seconds=wait)
        assert not services.nodes_due(now).filter(pk=node.pk).exists()
        # Due once the wait is (nearly: half an interval of slack) over.
        assert services.nodes_due(now + timedelta(seconds=wait - 2)).filter(pk=node.pk).exists()
    services.record_poll_results(
        [PollResult(node.pk, snapshot("h", gpu("GPU-b")), "", 0.01)], now=now
    )
    node.refresh_from_db()
    assert (node.state, node.missed_polls, node.poll_after) == (NodeState.ONLINE, 0, None)


def test_fixing_the_address_or_token_polls_the_node_at_the_next_cycle(db, backoff):
    node = Node.objects.create(
        name="n", agent_url="http://127.0.0.1:9", agent_token="t", missed_polls=5,
        poll_after=timezone.now() + timedelta(seconds=30),
    )  # fmt: skip
    registration.update_node(node.pk, labels={"rack": "a"})
    node.refresh_from_db()
    assert node.poll_after is not None  # a label changes nothing about reachability
    # A new URL takes the token again (tests/test_token_follows_url.py).
    registration.update_node(node.pk, agent_url="http://127.0.0.1:10", token="t")
    node.refresh_from_db()
    assert node.poll_after is None


def test_a_dead_agent_is_skipped_while_it_backs_off_and_the_others_are_polled(
    db, backoff, sim_agents
):
    agents = sim_agents(nodes=1, gpus=2)
    alive = Node.objects.create(name="alive", agent_url=agents.urls[0], agent_token=agents.token)
    dead = Node.objects.create(
        name="dead", agent_url=f"http://127.0.0.1:{procs.free_port()}", agent_token="t"
    )
    polled = []
    for _ in range(4):
        summary = services.poll_fleet()
        polled.append(summary.polled)
    dead.refresh_from_db()
    # Cycles 1-3 poll both (the third miss starts the back-off); cycle 4 only the live one.
    assert polled == [2, 2, 2, 1]
    assert dead.state == NodeState.OFFLINE and dead.missed_polls == 3
    assert "refused" in dead.last_error.lower() or dead.last_error
    alive.refresh_from_db()
    assert alive.state == NodeState.ONLINE and alive.gpus.count() == 2
