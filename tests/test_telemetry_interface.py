"""telemetry.interface: what the apps above read of telemetry, and the cycle signal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from agents.models import GPU, Node
from telemetry import interface, rollups, sample_buffer, services
from telemetry.poller import PollResult

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@pytest.fixture
def nodes(db) -> list[Node]:
    return [
        Node.objects.create(name=f"gpu-{i}", agent_url=f"http://127.0.0.1:{i + 1}", agent_token="t")
        for i in range(2)
    ]


def _answer(node: Node, uuid: str, util: int, **extra) -> PollResult:
    card = {"uuid": uuid, "index": 0, "name": "NVIDIA H100", "utilization_gpu_pct": util,
            "memory_used_mib": 1000, **extra}  # fmt: skip
    return PollResult(node.pk, {"hostname": node.name, "gpus": [card]}, "", 0.01)


def test_latest_gives_each_nodes_cards_as_the_schemas_fields(nodes):
    processes = [{"user": "carol", "memory_used_mib": 900}]
    services.record_poll_results(
        [_answer(nodes[0], "GPU-A", 40, processes=processes),
         PollResult(nodes[1].pk, None, "connection refused", 0.01)]
    )  # fmt: skip
    latest = interface.latest([n.pk for n in nodes])
    assert set(latest) == {nodes[0].pk}  # no readings for the node that did not answer
    card = latest[nodes[0].pk].cards["GPU-A"]
    assert card.values["utilization_gpu_pct"] == 40 and card.values["memory_used_mib"] == 1000
    assert "processes" not in card.values and card.processes == tuple(processes)
    assert latest[nodes[0].pk].seen_at.tzinfo is not None


def test_usage_over_a_window_weighs_each_minute_by_its_samples(nodes):
    card = GPU.objects.create(node=nodes[0], index=0, uuid="GPU-A", model="H100")
    ids = {"GPU-A": card.pk}
    proc = [{"user": "carol", "memory_used_mib": 500}]
    for second, util in ((0, 10), (20, 20), (40, 30)):  # minute 0: three samples
        gpu = {"uuid": "GPU-A", "index": 0, "utilization_gpu_pct": util, "processes": proc}
        sample_buffer.buffer_samples(
            {nodes[0].pk: {"gpus": [gpu]}}, ids, T0 + timedelta(seconds=second)
        )
    gpu = {"uuid": "GPU-A", "index": 0, "utilization_gpu_pct": 60}  # minute 1: one sample
    sample_buffer.buffer_samples({nodes[0].pk: {"gpus": [gpu]}}, ids, T0 + timedelta(minutes=1))
    rollups.flush(T0 + timedelta(minutes=2))
    usage = interface.card_usage([card.pk], T0, T0 + timedelta(hours=1))[card.pk]
    assert usage.samples == 4
    assert (usage.values["util_avg"], usage.values["util_max"]) == (30.0, 60.0)
    [owner] = interface.owner_usage([card.pk], T0, T0 + timedelta(hours=1))
    assert (owner.gpu_id, owner.owner, owner.samples) == (card.pk, "carol", 3)
    assert owner.values["memory_used_avg_mib"] == 500.0
    assert interface.card_usage([card.pk], T0 + timedelta(hours=1), T0 + timedelta(hours=2)) == {}


@pytest.mark.django_db(transaction=True)
def test_the_cycle_signal_comes_after_the_commit_and_never_for_a_rollback(nodes):
    seen: list[interface.PollCycle] = []

    def receiver(sender, cycle, **kwargs):
        seen.append(cycle)

    def broken(sender, cycle, **kwargs):
        raise RuntimeError("a subscriber that fails")

    interface.poll_cycle_recorded.connect(receiver)
    interface.poll_cycle_recorded.connect(broken)
    try:
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            services.record_poll_results([_answer(nodes[0], "GPU-A", 1)])
            assert seen == []  # not before the commit
            raise ZeroDivisionError
        assert seen == []
        services.record_poll_results(
            [_answer(nodes[0], "GPU-A", 1), PollResult(nodes[1].pk, None, "refused", 0.01)]
        )
    finally:
        interface.poll_cycle_recorded.disconnect(receiver)
        interface.poll_cycle_recorded.disconnect(broken)
    [cycle] = seen  # the failing subscriber stopped neither the cycle nor the others
    assert cycle.answered == (nodes[0].pk,) and cycle.failed == {nodes[1].pk: "refused"}


def test_the_cycles_receivers_read_what_redis_holds_without_reading_it_back(
    nodes, monkeypatch, django_capture_on_commit_callbacks
):
    from telemetry import readings

    services.record_poll_results([_answer(nodes[1], "GPU-B", 7)])  # stored, not in the cycle
    inside: list[dict] = []
    asked: list[list[int]] = []
    read_back = readings.redis_client.client().hmget

    def hmget(key, ids):
        asked.append(list(ids))
        return read_back(key, ids)

    def receiver(sender, cycle, **kwargs):
        monkeypatch.setattr(readings.redis_client.client(), "hmget", hmget)
        inside.append(interface.latest([n.pk for n in nodes]))
        monkeypatch.undo()

    interface.poll_cycle_recorded.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            services.record_poll_results([_answer(nodes[0], "GPU-A", 40)])
    finally:
        interface.poll_cycle_recorded.disconnect(receiver)
    assert asked == [[nodes[1].pk]]  # the cycle's own node came from memory
    assert readings._cycle_latest is None  # and only while its receivers ran
    assert inside == [interface.latest([n.pk for n in nodes])]  # the same as Redis holds
