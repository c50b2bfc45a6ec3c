"""The reading schema's check of a whole answer: the node's own keys, its cards, the cap."""

from __future__ import annotations

import pytest

from agents.gpu_agent import schema


def card(uuid: str = "GPU-1", index: int = 0, **fields) -> dict:
    return {"uuid": uuid, "index": index, **fields}


def answer(**node) -> dict:
    return {
        "agent": {"version": "0.1.0", "backend": "sim", "interval_s": 5.0},
        "hostname": "gpu-node-01",
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "collected_at": 1764500000.25,
        "collect_duration_s": 0.01,
        "gpus": [card()],
        **node,
    }


def test_a_sound_answer_passes_as_it_came():
    data = answer()
    assert schema.check_snapshot(data) is data


def test_the_node_keys_may_be_absent_as_older_agents_leave_them():
    assert schema.check_snapshot({"gpus": [card()]})


@pytest.mark.parametrize(
    ("node", "field", "why"),
    [
        ({"hostname": "h" * 256}, "hostname", "longer than 255"),
        ({"hostname": "gpu\x00node"}, "hostname", "NUL"),
        ({"hostname": 7}, "hostname", "not a string"),
        ({"driver_version": "5" * 65}, "driver_version", "longer than 64"),
        ({"cuda_version": ["12.4"]}, "cuda_version", "not a string"),
        ({"collected_at": "now"}, "collected_at", "not a number"),
        ({"collected_at": float("inf")}, "collected_at", "not a finite number"),
        ({"collected_at": float("nan")}, "collected_at", "not a finite number"),
        ({"collected_at": 2**64}, "collected_at", "outside"),
        ({"collected_at": -1}, "collected_at", "outside"),
        ({"collected_at": True}, "collected_at", "not a number"),
        ({"collect_duration_s": 1e300}, "collect_duration_s", "outside"),
        ({"agent": "0.1.0"}, "agent", "not an object"),
        ({"agent": {"version": "v" * 65}}, "agent.version", "longer than 64"),
        ({"agent": {"version": 1}}, "agent.version", "not a string"),
        ({"agent": {"backend": "sim\x00"}}, "agent.backend", "NUL"),
    ],
)
def test_a_bad_node_key_refuses_the_answer_naming_it(node, field, why):
    with pytest.raises(schema.SnapshotError, match=why) as refused:
        schema.check_snapshot(answer(**node))
    assert f"node '{field}'" in str(refused.value)


def test_a_uuid_listed_twice_refuses_the_answer():
    with pytest.raises(schema.SnapshotError, match="UUID more than once"):
        schema.check_snapshot(answer(gpus=[card("GPU-1", 0), card("GPU-1", 1)]))


def test_a_card_with_an_unfit_uuid_is_named_by_its_place_not_by_that_uuid():
    # The message becomes the node's last_error: a NUL in it would fail the cycle's UPDATE.
    with pytest.raises(schema.SnapshotError) as refused:
        schema.check_snapshot(answer(gpus=[card("GPU-\x00" + "x" * 100, index=40000)]))
    assert str(refused.value) == "GPU entry 0: 'index' is outside 0..32767"


def test_more_cards_than_the_cap_refuse_the_whole_answer():
    gpus = [card(f"GPU-{i}", i) for i in range(9)]
    assert schema.check_snapshot(answer(gpus=gpus), max_gpus=9)
    with pytest.raises(schema.SnapshotError, match="9 GPUs, more than 8"):
        schema.check_snapshot(answer(gpus=gpus), max_gpus=8)


def test_a_lone_surrogate_is_refused_as_no_database_can_store_it():
    # Python's json module (behind requests, for Prometheus) reads "\ud800" into one.
    with pytest.raises(schema.SnapshotError, match="'name' is not valid UTF-8"):
        schema.check_snapshot(answer(gpus=[card(name="A100 \ud800")]))
    assert schema.check_snapshot(answer(gpus=[card(name="A100 显卡")]))
