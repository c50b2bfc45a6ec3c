"""Drain, failure and cordon: slices move to healthy cards or are stranded (kept, capacity
released, retried); faulty cards are cordoned until an admin clears them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.choices import GpuHealth, NodeState
from agents.models import Node
from audit.interface import AuditEntry
from pools import agent_reports, failover, tasks
from pools.choices import AllocationState
from pools.interface import (
    Ask,
    PlacementError,
    allocations_moved,
    card_cordoned,
    clear_cordon,
    drain_node,
    place_lease,
)
from pools.models import Allocation, PoolCard
from telemetry import services
from telemetry.poller import PollResult
from tests.factories import NodeFactory, PoolFactory, UserFactory, online_cards


@pytest.fixture
def two_nodes(db):
    return online_cards(1), online_cards(1)


@pytest.fixture
def pool(two_nodes):
    return PoolFactory(cards=[*two_nodes[0], *two_nodes[1]])


def place(pool, **ask):
    ask = {"compute_pct": 30, "memory_mib": 8192, "node": "", **ask}
    return place_lease(pool, Ask(**ask), holder=UserFactory(), unix_user="alice")


def placed_on(pool, two_nodes, **ask):
    """An unpinned lease's slice, and (its card, the other card)."""
    allocation = place(pool, **ask).allocations.get()
    (a,), (b,) = two_nodes
    return allocation, (a, b) if allocation.gpu_id == a.pk else (b, a)


def counters(gpu) -> tuple[int, int, int]:
    card = PoolCard.objects.get(gpu=gpu)
    return card.compute_allocated, card.memory_allocated_mib, card.slices


@pytest.fixture
def moves():
    seen = []

    def receiver(sender, moves, **kwargs):
        seen.extend(moves)

    allocations_moved.connect(receiver)
    yield seen
    allocations_moved.disconnect(receiver)


def test_drain_moves_slices_to_another_node_and_tells_owners(
    pool, two_nodes, alice, moves, django_capture_on_commit_callbacks
):
    allocation, (a, b) = placed_on(pool, two_nodes)
    lease = allocation.lease
    with django_capture_on_commit_callbacks(execute=True):
        result = drain_node(a.node, alice, address="192.0.2.1")
    assert len(result.moved) == 1 and result.stranded == []
    allocation.refresh_from_db()
    assert allocation.gpu_id == b.pk and allocation.state == AllocationState.ACTIVE
    assert (allocation.compute_pct, allocation.memory_mib) == (30, 8192)
    assert allocation.lease_id == lease.pk
    assert counters(a) == (0, 0, 0) and counters(b) == (30, 8192, 1)
    a.node.refresh_from_db()
    assert a.node.state == NodeState.DRAINING
    [move] = moves
    assert (move.lease_id, move.from_gpu_id, move.to_gpu_id) == (lease.pk, a.pk, b.pk)
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"node.drained", "allocation.moved"} <= actions
    assert AuditEntry.objects.get(action="node.drained").address == "192.0.2.1"
    with pytest.raises(PlacementError):  # a draining node takes no new slices
        place(pool, node=a.node.name)


def test_what_cannot_move_is_stranded_kept_and_placed_again_later(
    pool, two_nodes, alice, moves, django_capture_on_commit_callbacks
):
    (a,), (b,) = two_nodes
    place(pool, node=b.node.name, compute_pct=80)  # b has 20 % left
    allocation = place(pool, compute_pct=50).allocations.get()
    assert allocation.gpu_id == a.pk
    with django_capture_on_commit_callbacks(execute=True):
        result = drain_node(a.node, alice)
    assert result.moved == [] and len(result.stranded) == 1
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.STRANDED
    assert allocation.stranded_reason == "node drained"
    assert counters(a) == (0, 0, 0)  # its capacity is released
    assert moves[0].to_gpu_id is None
    # Room comes back: the beat task's retry places it.
    Allocation.objects.filter(gpu=b, state=AllocationState.ACTIVE).update(compute_pct=10)
    PoolCard.objects.filter(gpu=b).update(compute_allocated=10)
    assert len(failover.retry_stranded().moved) == 1
    allocation.refresh_from_db()
    assert (allocation.state, allocation.gpu_id, allocation.stranded_reason) == (
        AllocationState.ACTIVE, b.pk, "")  # fmt: skip
    assert counters(b)[0] == 60


def test_a_retry_that_still_finds_no_room_changes_nothing(pool, two_nodes, alice):
    (a,), (b,) = two_nodes
    place(pool, node=b.node.name, compute_pct=80)
    allocation = place(pool, compute_pct=50).allocations.get()
    drain_node(a.node, alice)
    entries = AuditEntry.objects.count()
    assert failover.retry_stranded().moved == []
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.STRANDED and AuditEntry.objects.count() == entries


def test_a_lost_card_moves_its_slices(pool, two_nodes):
    allocation, (a, b) = placed_on(pool, two_nodes)
    type(a).objects.filter(pk=a.pk).update(health=GpuHealth.LOST)
    result = failover.move_failed([a.node_id])
    assert [m.reason for m in result.moved] == ["card lost"]
    allocation.refresh_from_db()
    assert allocation.gpu_id == b.pk and counters(a) == (0, 0, 0)


def test_a_node_offline_past_the_grace_period_moves_its_slices(pool, two_nodes, settings):
    settings.POOLS_OFFLINE_GRACE_S = 600
    allocation, (a, b) = placed_on(pool, two_nodes)
    Node.objects.filter(pk=a.node_id).update(
        state=NodeState.OFFLINE, last_seen=timezone.now() - timedelta(seconds=60)
    )
    assert failover.move_failed().moved == []  # within the grace period: it stays
    Node.objects.filter(pk=a.node_id).update(last_seen=timezone.now() - timedelta(seconds=700))
    [move] = failover.move_failed().moved
    assert move.reason == "node offline past the grace period"
    allocation.refresh_from_db()
    assert allocation.gpu_id == b.pk


def fault_answer(gpu, **values) -> PollResult:
    card = {"uuid": gpu.uuid, "index": gpu.index, **values}
    return PollResult(gpu.node_id, {"hostname": gpu.node.name, "gpus": [card]}, "", 0.01)


@pytest.mark.parametrize(
    ("values", "reason"),
    [({"xid_last": 79}, "critical XID 79"),
     ({"ecc_uncorrected_total": 2}, "uncorrectable ECC errors: 2")],
)  # fmt: skip
def test_a_critical_xid_or_uncorrectable_ecc_cordons_the_card_until_cleared(
    pool, two_nodes, alice, values, reason, django_capture_on_commit_callbacks
):
    (a,), _ = two_nodes
    lease = place(pool, node=a.node.name)
    told = []
    card_cordoned.connect(receiver := lambda sender, cordon, **kw: told.append(cordon))
    try:
        services.record_poll_results([fault_answer(a, **values)])
        outcome = agent_reports.compare([a.node_id])
        failover.apply_marks(outcome.marks)
        with django_capture_on_commit_callbacks(execute=True):
            for card_id, why in outcome.cordons:
                failover.cordon_card(card_id, why)
    finally:
        card_cordoned.disconnect(receiver)
    card = PoolCard.objects.get(gpu=a)
    assert card.cordoned and card.cordon_reason == reason
    assert told[0].lease_ids == (lease.pk,) and told[0].reason == reason
    assert lease.allocations.get().gpu_id == a.pk  # its slices stay
    with pytest.raises(PlacementError):
        place(pool, node=a.node.name)
    # The same counters at the next cycle do not cordon it again once cleared.
    assert clear_cordon(card, alice)
    services.record_poll_results([fault_answer(a, **values)])
    assert agent_reports.compare([a.node_id]).cordons == []
    place(pool, node=a.node.name)
    assert {"pool_card.cordoned", "pool_card.cordon_cleared"} <= set(
        AuditEntry.objects.values_list("action", flat=True)
    )


def test_a_harmless_xid_does_not_cordon(pool, two_nodes):
    (a,), _ = two_nodes
    services.record_poll_results([fault_answer(a, xid_last=13)])
    outcome = agent_reports.compare([a.node_id])
    assert outcome.cordons == [] and outcome.marks


# --- the API ----------------------------------------------------------------------------


def test_drain_through_the_api_needs_pools_change_pool(client, pool, two_nodes, alice, bob):
    allocation, (a, b) = placed_on(pool, two_nodes)
    url = reverse("api:pool-node-drain", args=[a.node_id])
    assert client.post(url).status_code in (401, 403)
    client.force_login(bob)
    assert client.post(url).status_code == 403
    a.node.refresh_from_db()
    assert a.node.state == NodeState.ONLINE and Allocation.objects.get().gpu_id == a.pk
    client.force_login(alice)
    answer = client.post(url)
    assert answer.status_code == 200
    assert answer.json() == {"node": a.node_id, "state": "draining", "moved": 1, "stranded": 0}
    allocation.refresh_from_db()
    assert allocation.gpu_id == b.pk


def test_drain_of_an_unknown_node_is_404(client, alice, db):
    client.force_login(alice)
    assert client.post(reverse("api:pool-node-drain", args=[999999])).status_code == 404


def test_clear_cordon_through_the_api(client, pool, two_nodes, alice, bob):
    (a,), _ = two_nodes
    card = PoolCard.objects.get(gpu=a)
    url = reverse("api:pool-card-clear-cordon", args=[card.pk])
    client.force_login(alice)
    assert client.post(url).status_code == 409  # not cordoned: nothing to clear
    failover.cordon_card(card.pk, "critical XID 79")
    client.force_login(bob)
    assert client.post(url).status_code == 403
    card.refresh_from_db()
    assert card.cordoned
    client.force_login(alice)
    answer = client.post(url)
    assert answer.status_code == 200 and answer.json()["cordoned"] is False
    card.refresh_from_db()
    assert not card.cordoned


def test_a_user_granted_pools_change_pool_may_drain(client, pool, two_nodes):
    (a,), _ = two_nodes
    user = UserFactory(permissions=("pools.change_pool",))
    client.force_login(user)
    assert client.post(reverse("api:pool-node-drain", args=[a.node_id])).status_code == 200


def test_prometheus_nodes_cannot_be_drained(client, alice, db):
    node = NodeFactory(source="prometheus", agent_url="")
    client.force_login(alice)
    assert client.post(reverse("api:pool-node-drain", args=[node.pk])).status_code == 404


def test_a_poll_cycle_notes_its_nodes_and_the_task_moves_slices_off_a_lost_card(
    pool, two_nodes, django_capture_on_commit_callbacks
):
    allocation, (a, b) = placed_on(pool, two_nodes)
    lost = {"uuid": a.uuid, "index": a.index, "health": "lost"}
    answer = PollResult(a.node_id, {"hostname": a.node.name, "gpus": [lost]}, "", 0.01)
    with django_capture_on_commit_callbacks(execute=True):  # the cycle's signal is sent
        services.record_poll_results([answer])
    done = tasks.after_poll_cycle.apply().get()  # the queued run, here in this process
    assert done["moved"] == 1
    allocation.refresh_from_db()
    assert allocation.gpu_id == b.pk
    assert tasks.after_poll_cycle.apply().get()["moved"] == 0  # nothing noted since
