"""Reconciliation finds each kind of drift, repairs it and counts it in /metrics."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.choices import NodeState
from pools import reconcile
from pools.choices import AgentSync, AllocationState
from pools.interface import Ask, drift, place_lease
from pools.models import Allocation, PoolCard
from telemetry import services
from telemetry.poller import PollResult
from tests.factories import NodeFactory, PoolFactory, UserFactory, online_cards


@pytest.fixture
def cards(db):
    node = NodeFactory(state=NodeState.ONLINE)
    return online_cards(2, node=node)


@pytest.fixture
def pool(cards):
    return PoolFactory(cards=cards)


def place(pool, **ask):
    ask = {"compute_pct": 30, "memory_mib": 8192, **ask}
    lease = place_lease(pool, Ask(**ask), holder=UserFactory(), unix_user="alice")
    return lease.allocations.get()


def metric(client, kind: str) -> float:
    text = client.get("/metrics").content.decode()
    line = next(
        line for line in text.splitlines()
        if line.startswith(f'gpuportal_reconcile_drift_total{{kind="{kind}"}}')
    )  # fmt: skip
    return float(line.rsplit(" ", 1)[1])


def test_nothing_drifts_after_plain_placements(pool):
    place(pool)
    Allocation.objects.update(agent_sync=AgentSync.CONFIRMED)
    assert drift() == []


def test_card_counters_that_do_not_add_up_are_rewritten_and_counted(pool, client):
    allocation = place(pool)
    Allocation.objects.update(agent_sync=AgentSync.CONFIRMED)
    card = PoolCard.objects.get(gpu=allocation.gpu)
    PoolCard.objects.filter(pk=card.pk).update(compute_allocated=90, slices=3)
    [found] = drift()
    assert (found.kind, found.pool_card_id) == ("counters", card.pk)
    result = reconcile.reconcile()
    assert result.found["counters"] == 1 and result.counters_fixed == 1
    card.refresh_from_db()
    assert (card.compute_allocated, card.memory_allocated_mib, card.slices) == (30, 8192, 1)
    assert drift() == []
    assert metric(client, "counters") == 1.0


def test_a_card_with_no_slices_left_holds_no_capacity(pool, cards):
    PoolCard.objects.filter(gpu=cards[1]).update(held_whole=True, slices=1,
                                                 compute_allocated=100)  # fmt: skip
    reconcile.reconcile()
    card = PoolCard.objects.get(gpu=cards[1])
    assert (card.held_whole, card.slices, card.compute_allocated) == (False, 0, 0)


def test_a_slice_the_agent_keeps_after_release_is_sent_again(pool, cards, client):
    node = cards[0].node
    card = {"uuid": cards[0].uuid, "index": 0}
    held = {"allocation_id": "alloc-999999", "gpu_uuid": cards[0].uuid, "memory_limit_mib": 1}
    snapshot = {"hostname": node.name, "gpus": [card], "allocations": [held], "violations": []}
    services.record_poll_results([PollResult(node.pk, snapshot, "", 0.01)])
    [found] = drift()
    assert (found.kind, found.node_id, found.detail) == ("held_after_release", node.pk,
                                                         "alloc-999999")  # fmt: skip
    assert node.pk in reconcile.reconcile().resend
    assert metric(client, "held_after_release") == 1.0


def test_a_slice_the_agent_never_took_is_sent_again(pool, client):
    allocation = place(pool)
    Allocation.objects.filter(pk=allocation.pk).update(
        placed_at=timezone.now() - timedelta(minutes=5)
    )
    [found] = drift()
    assert (found.kind, found.allocation_id) == ("never_taken", allocation.pk)
    assert allocation.gpu.node_id in reconcile.reconcile().resend
    assert metric(client, "never_taken") == 1.0


def test_a_slice_on_a_deleted_card_is_replaced_and_capacity_follows(pool, cards, client):
    allocation = place(pool)
    Allocation.objects.update(agent_sync=AgentSync.CONFIRMED)
    old = allocation.gpu_id
    allocation.gpu.delete()  # the pool card goes with it; the allocation stays, on no card
    allocation.refresh_from_db()
    assert allocation.gpu is None and allocation.state == AllocationState.ACTIVE
    assert [d.kind for d in drift()] == ["stranded"]
    result = reconcile.reconcile()
    assert result.moved == 1
    allocation.refresh_from_db()
    other = next(c for c in cards if c.pk != old)
    assert allocation.gpu_id == other.pk and allocation.state == AllocationState.ACTIVE
    card = PoolCard.objects.get(gpu=other)
    assert (card.compute_allocated, card.slices) == (30, 1)
    assert metric(client, "stranded") == 1.0


def test_a_slice_on_a_card_that_left_its_pool_is_stranded_when_nothing_else_fits(db, client):
    [gpu] = online_cards(1)
    pool = PoolFactory(cards=[gpu])
    allocation = place(pool)
    PoolCard.objects.filter(gpu=gpu).delete()
    reconcile.reconcile()
    allocation.refresh_from_db()
    assert allocation.state == AllocationState.STRANDED
    assert allocation.stranded_reason == "card left its pool"
    assert Allocation.objects.filter(pk=allocation.pk).exists()  # kept, never deleted
