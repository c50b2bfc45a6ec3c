"""Recording poll results: inventory, node health, latest readings, live push."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.cache import cache

from agents.choices import GpuHealth, NodeState
from agents.models import GPU, Node
from telemetry import live, readings, services
from telemetry.poller import PollResult
from tests.factories import NodeFactory


def snapshot(hostname: str, *gpus: dict) -> dict:
    return {
        "agent": {"version": "0.1.0", "backend": "sim"},
        "hostname": hostname,
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "collected_at": 1764500000.0,
        "gpus": list(gpus),
    }


def gpu(uuid: str, index: int = 0, **readings_) -> dict:
    return {
        "uuid": uuid,
        "index": index,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_total_mib": 81920,
        "health": "ok",
        "utilization_gpu_pct": 50,
        **readings_,
    }


def ok(node: Node, snap: dict) -> PollResult:
    return PollResult(node.pk, snap, "", 0.01)


def failed(node: Node, error: str = "connection refused") -> PollResult:
    return PollResult(node.pk, None, error, 0.01)


@pytest.fixture
def node(db) -> Node:
    return NodeFactory(name="gpu-a")


def test_first_answer_creates_the_gpus_and_brings_the_node_online(node):
    summary = services.record_poll_results(
        [ok(node, snapshot("host-a", gpu("GPU-1", 0), gpu("GPU-2", 1)))]
    )
    node.refresh_from_db()
    assert node.state == NodeState.ONLINE
    assert node.hostname == "host-a"
    assert node.driver_version == "550.54.15"
    assert node.last_seen is not None
    assert summary.gpus_created == 2
    gpus = list(node.gpus.order_by("index").values_list("uuid", "index", "health"))
    assert gpus == [("GPU-1", 0, GpuHealth.OK), ("GPU-2", 1, GpuHealth.OK)]


def test_repeated_answers_update_rather_than_duplicate(node):
    for _ in range(3):
        services.record_poll_results([ok(node, snapshot("host-a", gpu("GPU-1")))])
    assert GPU.objects.count() == 1


def test_node_goes_offline_only_after_the_configured_misses(node, settings):
    settings.NODE_OFFLINE_AFTER_MISSES = 3
    services.record_poll_results([ok(node, snapshot("host-a", gpu("GPU-1")))])
    for expected in [NodeState.ONLINE, NodeState.ONLINE, NodeState.OFFLINE]:
        services.record_poll_results([failed(node)])
        node.refresh_from_db()
        assert node.state == expected
    assert node.missed_polls == 3
    assert node.last_error == "connection refused"
    # Nothing is deleted: the cards stay in the inventory with their last-seen time.
    assert node.gpus.count() == 1


def test_node_comes_back_online_when_it_answers_again(node, settings):
    settings.NODE_OFFLINE_AFTER_MISSES = 1
    services.record_poll_results([failed(node)])
    services.record_poll_results([ok(node, snapshot("host-a", gpu("GPU-1")))])
    node.refresh_from_db()
    assert (node.state, node.missed_polls, node.last_error) == (NodeState.ONLINE, 0, "")


def test_polling_never_overrides_an_admins_drain(node):
    node.state = NodeState.DRAINING
    node.save()
    services.record_poll_results([ok(node, snapshot("host-a", gpu("GPU-1")))])
    node.refresh_from_db()
    assert node.state == NodeState.DRAINING


def test_a_card_the_agent_reports_lost_or_stops_listing_is_marked_lost(node):
    services.record_poll_results([ok(node, snapshot("h", gpu("GPU-1", 0), gpu("GPU-2", 1)))])
    services.record_poll_results([ok(node, snapshot("h", {**gpu("GPU-1", 0), "health": "lost"}))])
    health = dict(GPU.objects.values_list("uuid", "health"))
    assert health == {"GPU-1": GpuHealth.LOST, "GPU-2": GpuHealth.LOST}


def test_a_card_reported_by_another_node_stays_until_an_admin_decides(node):
    # A moved card is an admin's to confirm (tests/test_card_claims.py): never silent.
    other = NodeFactory(name="gpu-b")
    services.record_poll_results([ok(node, snapshot("a", gpu("GPU-1")))])
    services.record_poll_results([ok(other, snapshot("b", gpu("GPU-1", 3)))])
    card = GPU.objects.get(uuid="GPU-1")
    assert (card.node, card.index) == (node, 0)


def test_latest_readings_are_cached_and_joined_to_the_inventory(node, store):
    cache.clear()
    services.record_poll_results(
        [ok(node, snapshot("a", gpu("GPU-1", temperature_c=61, power_w=250.5)))]
    )
    node.refresh_from_db()
    detail = readings.node_detail(node)
    [card] = detail["gpus"]
    assert card["uuid"] == "GPU-1"
    assert card["utilization_gpu_pct"] == 50
    assert card["temperature_c"] == 61
    assert card["power_w"] == 250.5
    assert detail["state"] == NodeState.ONLINE
    [tile] = readings.node_summaries()
    assert (tile["gpu_count"], tile["util_avg"], tile["temperature_max_c"]) == (1, 50.0, 61)


@pytest.mark.django_db(transaction=True)
def test_each_recorded_poll_is_pushed_to_the_fleet_group_after_commit():
    node = NodeFactory(name="gpu-a")
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(live.FLEET_GROUP, channel)
    try:
        services.record_poll_results([ok(node, snapshot("a", gpu("GPU-1", 0), gpu("GPU-2", 1)))])
        message = async_to_sync(asyncio.wait_for)(layer.receive(channel), 5)
    finally:
        async_to_sync(layer.group_discard)(live.FLEET_GROUP, channel)
    assert message["type"] == "fleet.nodes"
    [tile] = json.loads(message["text"])["nodes"]
    # The fleet page gets a tile per node, never the cards themselves.
    assert (tile["name"], tile["gpu_count"], tile["util_avg"]) == ("gpu-a", 2, 50.0)
    assert "gpus" not in tile


@pytest.mark.django_db(transaction=True)
def test_card_details_are_pushed_only_to_watched_nodes(store):
    watched_node = NodeFactory(name="gpu-a")
    quiet_node = NodeFactory(name="gpu-b")
    layer = get_channel_layer()
    channels = {n.pk: async_to_sync(layer.new_channel)() for n in (watched_node, quiet_node)}
    for pk, channel in channels.items():
        async_to_sync(layer.group_add)(live.node_group(pk), channel)
    live.watch(watched_node.pk)
    services.record_poll_results(
        [
            ok(watched_node, snapshot("a", gpu("GPU-1", 0))),
            ok(quiet_node, snapshot("b", gpu("GPU-2", 0))),
        ]
    )
    message = async_to_sync(asyncio.wait_for)(layer.receive(channels[watched_node.pk]), 5)
    assert message["type"] == "node.detail"
    assert [g["uuid"] for g in json.loads(message["text"])["node"]["gpus"]] == ["GPU-1"]
    with pytest.raises(TimeoutError):
        async_to_sync(asyncio.wait_for)(layer.receive(channels[quiet_node.pk]), 0.5)


def test_results_for_a_node_deleted_mid_poll_are_ignored(node):
    gone = NodeFactory()
    result = ok(gone, snapshot("x", gpu("GPU-9")))
    gone.delete()
    summary = services.record_poll_results([result, ok(node, snapshot("a", gpu("GPU-1")))])
    assert summary.answered == 1
    assert not GPU.objects.filter(uuid="GPU-9").exists()


@pytest.mark.django_db(transaction=True)
def test_unchanged_cards_skip_the_comparison_yet_every_change_lands():
    node = NodeFactory(name="gpu-a")
    both = snapshot("a", gpu("GPU-1", 0), gpu("GPU-2", 1))
    services.record_poll_results([ok(node, both)])
    assert set(services._cards_seen[node.pk][2]) == {"GPU-1", "GPU-2"}
    summary = services.record_poll_results([ok(node, both)])
    assert (summary.gpus_seen, summary.gpus_created) == (2, 0)
    services.record_poll_results(
        [ok(node, snapshot("a", gpu("GPU-1", 0), {**gpu("GPU-2", 1), "health": "lost"}))]
    )
    assert GPU.objects.get(uuid="GPU-2").health == GpuHealth.LOST
    services.record_poll_results([ok(node, snapshot("a", gpu("GPU-1", 0), gpu("GPU-3", 1)))])
    assert set(GPU.objects.values_list("uuid", "health")) == {
        ("GPU-1", GpuHealth.OK),
        ("GPU-2", GpuHealth.LOST),
        ("GPU-3", GpuHealth.OK),
    }


def test_a_cycle_pauses_garbage_collection_and_always_restores_it(db, monkeypatch):
    import gc

    seen = []

    def poll(*args, **kwargs):
        seen.append(gc.isenabled())
        raise ConnectionError("boom")

    monkeypatch.setattr(services.poller, "poll", poll)
    assert gc.isenabled()
    with pytest.raises(ConnectionError):
        services.poll_fleet()
    assert seen == [False] and gc.isenabled()
