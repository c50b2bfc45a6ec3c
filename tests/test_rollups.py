"""History: minute and hour rollups from the sample buffer, folds, retention, and queries.

How claims of the buffer survive failures and races is in test_rollup_claims.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from agents.models import GPU
from telemetry import history, rollups, sample_buffer
from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute
from tests import rollups_scenario as scenario
from tests.factories import GPUFactory, NodeFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@pytest.fixture
def cards() -> list[GPU]:
    return GPUFactory.create_batch(2, node=NodeFactory(), model="H100")


def sample(cards, at, util, mem=1000, power=300.0, temp=60, processes=()):
    snapshot = {
        "gpus": [
            {"uuid": g.uuid, "index": g.index, "utilization_gpu_pct": util + i,
             "memory_used_mib": mem, "power_w": power, "temperature_c": temp,
             "processes": list(processes)}
            for i, g in enumerate(cards)
        ]
    }  # fmt: skip
    sample_buffer.buffer_samples({cards[0].node_id: snapshot}, {g.uuid: g.pk for g in cards}, at)


def test_a_finished_minute_becomes_one_row_per_gpu_with_avg_and_max(cards):
    for second, util in [(0, 10), (20, 30), (40, 50)]:
        sample(cards, T0 + timedelta(seconds=second), util)
    assert rollups.flush(T0 + timedelta(minutes=1)) == 2
    row = GpuMinute.objects.get(gpu=cards[0])
    assert (row.bucket, row.samples, row.util_avg, row.util_max) == (T0, 3, 30.0, 50.0)
    assert (row.memory_used_avg_mib, row.power_max_w, row.temperature_avg_c) == (1000, 300, 60)


def test_the_current_minute_is_not_flushed_until_it_is_over(cards):
    sample(cards, T0 + timedelta(seconds=30), 10)
    assert rollups.flush(T0 + timedelta(seconds=59)) == 0
    assert rollups.flush(T0 + timedelta(seconds=61)) == 2


def test_a_minute_is_flushed_once_even_when_flush_runs_twice(cards):
    sample(cards, T0, 10)
    later = T0 + timedelta(minutes=1)
    assert rollups.flush(later) == 2
    assert rollups.flush(later) == 0
    assert GpuMinute.objects.count() == 2


def test_missing_fields_stay_empty_rather_than_zero(cards):
    snapshot = {"gpus": [{"uuid": cards[0].uuid, "index": 0, "utilization_gpu_pct": 5}]}
    sample_buffer.buffer_samples({cards[0].node_id: snapshot}, {cards[0].uuid: cards[0].pk}, T0)
    rollups.flush(T0 + timedelta(minutes=1))
    row = GpuMinute.objects.get()
    assert row.util_avg == 5 and row.power_avg_w is None and row.temperature_max_c is None


def test_hours_are_recomputed_from_their_minutes(cards):
    for minute, util in [(0, 20), (1, 40), (59, 90)]:
        sample(cards, T0 + timedelta(minutes=minute), util)
        rollups.flush(T0 + timedelta(minutes=minute + 1))
    hour = GpuHour.objects.get(gpu=cards[0])
    assert (hour.bucket, hour.samples, hour.util_avg, hour.util_max) == (T0, 3, 50.0, 90.0)


def test_process_owners_are_rolled_up_per_card(cards):
    procs = [{"pid": 1, "user": "carol", "memory_used_mib": 500},
             {"pid": 2, "user": "carol", "memory_used_mib": 100},
             {"pid": 3, "user": "dave", "memory_used_mib": 50},
             {"pid": 4, "memory_used_mib": 999}]  # fmt: skip
    sample(cards, T0, 10, processes=procs)
    sample(cards, T0 + timedelta(seconds=30), 10, processes=procs[2:3])
    rollups.flush(T0 + timedelta(minutes=1))
    carol = OwnerMinute.objects.get(gpu=cards[0], owner="carol")
    assert (carol.samples, carol.memory_used_max_mib) == (1, 600)
    dave = OwnerMinute.objects.get(gpu=cards[0], owner="dave")
    assert (dave.samples, dave.memory_used_avg_mib) == (2, 50)
    assert OwnerHour.objects.filter(owner="carol").count() == 2
    usage = history.owner_usage([cards[0].pk], T0, T0 + timedelta(hours=1))
    assert [u["owner"] for u in usage] == ["carol", "dave"]


def test_samples_of_a_deleted_card_are_dropped_not_fatal(cards):
    sample(cards, T0, 10)
    cards[1].delete()
    assert rollups.flush(T0 + timedelta(minutes=1)) == 1


def test_series_for_several_cards_averages_utilization_and_sums_memory(cards):
    sample(cards, T0, 10, mem=1000)
    rollups.flush(T0 + timedelta(minutes=1))
    data = history.series([g.pk for g in cards], T0, T0 + timedelta(hours=1))
    assert data["resolution"] == "1m"
    [point] = data["points"]
    assert (point["gpus"], point["util_avg"], point["memory_used_avg_mib"]) == (2, 10.5, 2000)
    week = history.series([g.pk for g in cards], T0 - timedelta(days=6), T0 + timedelta(days=1))
    assert week["resolution"] == "1h" and week["points"][0]["util_max"] == 11


def test_retention_drops_only_rows_past_their_age(cards, settings):
    settings.ROLLUP_MINUTE_DAYS, settings.ROLLUP_HOUR_DAYS = 7, 400
    sample(cards, T0, 10)
    rollups.flush(T0 + timedelta(minutes=1))
    assert rollups.prune(T0 + timedelta(days=6)) == {"minutes": 0, "hours": 0}
    assert rollups.prune(T0 + timedelta(days=8)) == {"minutes": 2, "hours": 0}
    assert GpuHour.objects.count() == 2
    assert rollups.prune(T0 + timedelta(days=401)) == {"minutes": 0, "hours": 2}


def _hour(card) -> tuple:
    row = GpuHour.objects.get(gpu=card)
    return row.samples, row.util_avg, row.util_max


def test_samples_that_arrive_after_their_minute_was_flushed_are_merged_into_it(cards):
    sample(cards, T0, 10, processes=[{"pid": 1, "user": "carol", "memory_used_mib": 100}])
    assert rollups.flush(T0 + timedelta(minutes=1)) == 2
    # Polled at 10:00:59, recorded once minute 0 was already flushed.
    procs = [{"pid": 1, "user": "carol", "memory_used_mib": 300}]
    sample(cards, T0 + timedelta(seconds=59), 30, processes=procs)
    assert rollups.flush(T0 + timedelta(minutes=1, seconds=20)) == 2
    row = GpuMinute.objects.get(gpu=cards[0])
    assert (row.samples, row.util_avg, row.util_max) == (2, 20.0, 30.0)
    assert _hour(cards[0]) == (2, 20.0, 30.0)
    carol = OwnerMinute.objects.get(gpu=cards[0], owner="carol")
    assert (carol.samples, carol.memory_used_avg_mib, carol.memory_used_max_mib) == (2, 200, 300)
    assert OwnerHour.objects.get(gpu=cards[0], owner="carol").samples == 2


def test_minutes_reach_their_hours_at_the_next_fold_and_late_ones_at_once(cards):
    sample(cards, T0, 10)
    rollups.flush(T0 + timedelta(minutes=1))  # the first flush merges into the hours at once
    sample(cards, T0 + timedelta(minutes=1), 30)
    rollups.flush(T0 + timedelta(minutes=2))
    assert _hour(cards[0]) == (1, 10.0, 10.0)  # minute 1 waits for the fold
    rollups.flush(T0 + timedelta(minutes=rollups.FOLD_EVERY))
    assert _hour(cards[0]) == (2, 20.0, 30.0)
    rollups.flush(T0 + timedelta(minutes=rollups.FOLD_EVERY, seconds=30))  # nothing twice
    assert _hour(cards[0]) == (2, 20.0, 30.0)
    # A late sample for a minute folded already goes into its hour with the minute.
    sample(cards, T0 + timedelta(minutes=1, seconds=55), 50)
    rollups.flush(T0 + timedelta(minutes=rollups.FOLD_EVERY, seconds=40))
    row = GpuMinute.objects.get(gpu=cards[0], bucket=T0 + timedelta(minutes=1))
    assert (row.samples, row.util_avg, row.util_max) == (2, 40.0, 50.0)
    assert _hour(cards[0]) == (3, 30.0, 50.0)


def test_an_average_is_over_the_samples_that_reported_the_field(cards):
    card = cards[0]
    for second, extra in [(0, {"power_w": 100.0}), (20, {}), (40, {"power_w": 300.0})]:
        snapshot = {"gpus": [{"uuid": card.uuid, "index": 0, "utilization_gpu_pct": 5, **extra}]}
        sample_buffer.buffer_samples(
            {card.node_id: snapshot}, {card.uuid: card.pk}, T0 + timedelta(seconds=second)
        )
    rollups.flush(T0 + timedelta(minutes=1))
    row = GpuMinute.objects.get()
    assert (row.samples, row.power_avg_w, row.power_max_w) == (3, 200.0, 300.0)
    assert row.memory_used_avg_mib is None and row.memory_used_max_mib is None


def test_a_value_that_is_not_a_number_counts_as_not_reported(cards):
    snapshot = {"gpus": [
        {"uuid": cards[0].uuid, "index": 0, "utilization_gpu_pct": "N/A", "power_w": True,
         "temperature_c": 61, "memory_used_mib": 10**30,
         "processes": [{"pid": 1, "user": 1000, "memory_used_mib": "lots", "sm_util_pct": 9},
                       "not a process"]},
        {"uuid": cards[1].uuid, "index": 1, "utilization_gpu_pct": 7},
    ]}  # fmt: skip
    ids = {g.uuid: g.pk for g in cards}
    sample_buffer.buffer_samples({cards[0].node_id: snapshot}, ids, T0)
    assert rollups.flush(T0 + timedelta(minutes=1)) == 2
    first = GpuMinute.objects.get(gpu=cards[0])
    assert (first.util_avg, first.power_avg_w, first.temperature_avg_c) == (None, None, 61)
    assert first.memory_used_avg_mib is None  # an integer of 1e30: implausible
    assert GpuMinute.objects.get(gpu=cards[1]).util_avg == 7
    owner = OwnerMinute.objects.get()
    assert (owner.owner, owner.memory_used_avg_mib) == ("1000", None)


def test_retention_forgets_merged_claims_but_not_how_far_hours_are_folded(cards):
    sample(cards, T0, 10)
    rollups.flush(T0 + timedelta(minutes=1))

    def claims() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT claim FROM telemetry_rollupclaim ORDER BY claim")
            return [row[0] for row in cursor.fetchall()]

    assert len(claims()) == 2
    rollups.prune(T0 + timedelta(hours=2))
    assert len(claims()) == 2
    rollups.prune(T0 + rollups.CLAIM_MEMORY + timedelta(minutes=2))
    assert claims() == ["fold:hours"]


def test_a_history_with_late_samples_gives_the_hand_computed_rollups(cards, store):
    assert scenario.play(cards) == [2, 3, 0]
    assert scenario.rows(cards) == scenario.EXPECTED


IN_PROCESS_REDIS_SCENARIO = """
import django, json
django.setup()
from agents.models import GPU, Node
from portal import redis_client
from tests import rollups_scenario as scenario
node = Node.objects.create(name="n")
cards = [GPU.objects.create(node=node, index=i, uuid=f"GPU-{i}", model="T4") for i in range(2)]
written = scenario.play(cards)
rows = {name: [[list(key), values] for key, values in table.items()]
        for name, table in scenario.rows(cards).items()}
store = type(redis_client.client()).__module__.split(".")[0]
print(json.dumps({"written": written, "rows": rows, "store": store}))
"""


@pytest.mark.django_db(transaction=True)
def test_a_process_started_without_redis_url_gives_the_same_rollups_in_process(settings, tmp_path):
    # Settings read from the environment at the start, as ./dev up's process reads them
    # (the ``store`` fixture's in-process variant swaps the client of a process with Redis).
    from tests import procs

    env = procs.child_env(
        DATABASE_URL=procs.database_url(settings.DATABASES["default"]), REDIS_URL=None,
        PORTAL_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings",
    )  # fmt: skip
    out = procs.run_python(IN_PROCESS_REDIS_SCENARIO, env)
    assert out["store"] == "fakeredis"
    assert out["written"] == [2, 3, 0]
    rows = {
        name: {tuple(key): values for key, values in table} for name, table in out["rows"].items()
    }
    assert rows == scenario.EXPECTED


# --- implausible readings --------------------------------------------------------------


def test_a_huge_finite_reading_counts_as_not_reported_and_the_fleet_is_rolled_up(cards):
    # Card A's agent reports finite but absurd numbers (1e308 overflows an average; 1e155
    # after a 0 overflows the sum of squares behind it); card B is healthy throughout.
    def cycle(at, mem_a, power_a):
        snapshot = {"gpus": [
            {"uuid": cards[0].uuid, "index": 0, "utilization_gpu_pct": 10,
             "memory_used_mib": mem_a, "power_w": power_a,
             "processes": [{"pid": 1, "user": "carol", "memory_used_mib": mem_a}]},
            {"uuid": cards[1].uuid, "index": 1, "utilization_gpu_pct": 30,
             "memory_used_mib": 1000},
        ]}  # fmt: skip
        sample_buffer.buffer_samples(
            {cards[0].node_id: snapshot}, {g.uuid: g.pk for g in cards}, at
        )

    for minute in range(3):
        at = T0 + timedelta(minutes=minute)
        cycle(at, 0.0, 1e308)
        cycle(at + timedelta(seconds=20), 1e308, 1e155)
        cycle(at + timedelta(seconds=40), 1e155, 2e15)
        assert rollups.flush(at + timedelta(minutes=1)) == 2
    first = GpuMinute.objects.get(gpu=cards[0], bucket=T0)
    assert (first.samples, first.memory_used_avg_mib, first.memory_used_max_mib) == (3, 0.0, 0.0)
    assert (first.util_avg, first.power_avg_w, first.power_max_w) == (10.0, None, None)
    carol = OwnerMinute.objects.get(bucket=T0)
    assert (carol.samples, carol.memory_used_avg_mib) == (3, 0.0)
    # Minutes 1 and 2 reach their hour at the fold, which the absurd numbers do not stop.
    rollups.flush(T0 + timedelta(minutes=rollups.FOLD_EVERY))
    assert _hour(cards[1]) == (9, 30.0, 30.0)
    assert _hour(cards[0]) == (9, 10.0, 10.0)
    hour = GpuHour.objects.get(gpu=cards[0])
    assert (hour.memory_used_avg_mib, hour.power_max_w) == (0.0, None)
    assert OwnerHour.objects.get().samples == 9
