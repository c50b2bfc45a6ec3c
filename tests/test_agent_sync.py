"""Agent sync against a real simulated agent: slices arrive, are confirmed, are sent again
after the agent restarts with an empty state; refusals and silence are recorded."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest
from django.db import transaction

from agents.choices import NodeState
from agents.models import Node
from pools import agent_reports, sync
from pools.choices import AgentSync
from pools.interface import Ask, place_lease
from pools.models import Allocation, NodeSync, Pool
from telemetry import services
from tests import procs
from tests.conftest import AGENT_TOKEN
from tests.factories import PoolFactory, UserFactory, online_cards


def start_agent(port: int, gpus: int = 2) -> procs.Proc:
    command = [
        procs.PYTHON, "-m", "agents.gpu_agent", "--backend", "sim", "--gpus", str(gpus),
        "--interval", "0.2", "--hostname", f"sync{port}", "--listen", f"127.0.0.1:{port}",
    ]  # fmt: skip
    proc = procs.start("agent", command, procs.child_env(GPU_AGENT_TOKEN=AGENT_TOKEN))
    proc.wait_for("gpu-agent listening on")
    return proc


@pytest.fixture
def agent() -> Iterator[Callable[[int], procs.Proc]]:
    started: list[procs.Proc] = []

    def start(port: int) -> procs.Proc:
        started.append(start_agent(port))
        return started[-1]

    yield start
    for proc in started:
        proc.stop()


def held_by_agent(url: str) -> dict:
    request = urllib.request.Request(  # noqa: S310 (loopback)
        f"{url}/v1/desired-state", headers={"Authorization": f"Bearer {AGENT_TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


def registered(url: str) -> Node:
    """A node for the agent at ``url``, polled once so its cards are in the inventory."""
    node = Node.objects.create(name=url.rsplit(":", 1)[1], agent_url=url, agent_token=AGENT_TOKEN)
    summary = services.poll_fleet([node.pk])
    assert summary.answered == 1, summary.failed
    node.refresh_from_db()
    assert node.state == NodeState.ONLINE
    return node


def leased(node: Node, *, unix_user: str = "alice", count: int = 1) -> list[Allocation]:
    pool = Pool.objects.filter(cards__gpu__node=node).first() or PoolFactory(
        cards=list(node.gpus.all())
    )
    ask = Ask(count=count, compute_pct=30, memory_mib=8192)
    lease = place_lease(pool, ask, holder=UserFactory(), unix_user=unix_user)
    return list(lease.allocations.order_by("pk"))


@pytest.fixture
def port() -> int:
    return procs.free_port()


def test_slices_arrive_at_the_agent_and_its_answer_confirms_them(db, agent, port):
    agent(port)
    url = f"http://127.0.0.1:{port}"
    node = registered(url)
    first, second = leased(node, count=2)
    outcome = sync.sync_node(node.pk)
    assert outcome.error == "" and sorted(outcome.confirmed) == [first.pk, second.pk]
    held = held_by_agent(url)
    by_id = {s["allocation_id"]: s for s in held["slices"]}
    assert set(by_id) == {first.agent_id, second.agent_id}
    assert by_id[first.agent_id]["gpu_uuid"] == first.gpu.uuid
    assert by_id[first.agent_id]["compute_pct"] == 30
    assert by_id[first.agent_id]["memory_mib"] == 8192 and by_id[first.agent_id]["owner"] == "alice"
    assert set(Allocation.objects.values_list("agent_sync", flat=True)) == {AgentSync.CONFIRMED}
    assert NodeSync.objects.get(node=node).generation == held["generation"]


def test_the_agents_report_confirms_a_slice_and_a_restarted_agent_gets_it_again(db, agent, port):
    proc = agent(port)
    url = f"http://127.0.0.1:{port}"
    node = registered(url)
    [allocation] = leased(node)
    sync.sync_node(node.pk)
    Allocation.objects.update(agent_sync=AgentSync.PENDING)  # as if only sent
    services.poll_fleet([node.pk])
    outcome = agent_reports.compare([node.pk])
    assert outcome.confirmed == 1 and outcome.resend == set()
    allocation.refresh_from_db()
    assert allocation.agent_sync == AgentSync.CONFIRMED

    # The agent restarts without a state directory: it holds nothing.
    proc.stop()
    agent(port)
    assert held_by_agent(url)["slices"] == []
    services.poll_fleet([node.pk])
    outcome = agent_reports.compare([node.pk])
    assert outcome.resend == {node.pk}
    allocation.refresh_from_db()
    assert allocation.agent_sync == AgentSync.PENDING
    sync.sync_node(node.pk)
    assert [s["allocation_id"] for s in held_by_agent(url)["slices"]] == [allocation.agent_id]
    allocation.refresh_from_db()
    assert allocation.agent_sync == AgentSync.CONFIRMED


def test_a_slice_the_agent_refuses_is_marked_failed_and_the_others_are_held(db, agent, port):
    agent(port)
    url = f"http://127.0.0.1:{port}"
    node = registered(url)
    [good] = leased(node)
    [bad] = leased(node, unix_user="   ")  # the agent wants a user name
    outcome = sync.sync_node(node.pk)
    assert outcome.failed == [bad.pk] and outcome.confirmed == [good.pk]
    bad.refresh_from_db()
    assert bad.agent_sync == AgentSync.FAILED
    assert bad.agent_error.startswith("HTTP 422: slices[1].owner") and len(bad.agent_error) <= 200
    assert [s["allocation_id"] for s in held_by_agent(url)["slices"]] == [good.agent_id]
    # A failed slice is not expected of the agent: its report matches, nothing to resend.
    services.poll_fleet([node.pk])
    assert agent_reports.compare([node.pk]).resend == set()


def test_a_silent_agent_leaves_slices_pending_then_failed_after_the_last_try(db, settings):
    settings.POOLS_SYNC_MAX_ATTEMPTS = 2
    node = Node.objects.create(name="gone", agent_url="http://127.0.0.1:1", agent_token="t")
    online_cards(1, node=node)
    Node.objects.filter(pk=node.pk).update(state=NodeState.ONLINE)
    [allocation] = leased(node)
    first = sync.sync_node(node.pk)
    assert first.error and first.confirmed == []
    allocation.refresh_from_db()
    assert (allocation.agent_sync, allocation.agent_attempts) == (AgentSync.PENDING, 1)
    sync.sync_node(node.pk)
    allocation.refresh_from_db()
    assert allocation.agent_sync == AgentSync.FAILED and allocation.agent_error
    assert NodeSync.objects.get(node=node).error == allocation.agent_error


@pytest.mark.django_db(transaction=True)
def test_a_placement_reaches_the_agent_through_a_celery_worker(agent, port, child_env_for_test_db):
    agent(port)
    url = f"http://127.0.0.1:{port}"
    node = registered(url)
    worker = procs.start_celery_worker(child_env_for_test_db, "sync")
    try:
        with transaction.atomic():  # committed: the worker reads it
            allocations = leased(node, count=2)
            allocations += leased(node)  # a burst: one send carries all three
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(held_by_agent(url)["slices"]) == 3:
                break
            time.sleep(0.2)
        assert {s["allocation_id"] for s in held_by_agent(url)["slices"]} == {
            a.agent_id for a in allocations
        }
        worker.wait_for("pools.tasks.sync_desired_state", timeout=10)
        deadline = time.monotonic() + 10
        while (
            time.monotonic() < deadline
            and Allocation.objects.exclude(agent_sync=AgentSync.CONFIRMED).exists()
        ):
            time.sleep(0.2)
        assert set(Allocation.objects.values_list("agent_sync", flat=True)) == {AgentSync.CONFIRMED}
    finally:
        worker.stop()
