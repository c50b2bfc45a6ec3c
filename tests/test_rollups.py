"""History: the sample buffer, minute and hour rollups, retention, and queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents import rollups
from agents.models import GPU, GpuHour, GpuMinute, Node, OwnerHour, OwnerMinute

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


@pytest.fixture
def cards() -> list[GPU]:
    node = Node.objects.create(name="n1")
    return [GPU.objects.create(node=node, index=i, uuid=f"GPU-{i}", model="H100") for i in range(2)]


def sample(cards, at, util, mem=1000, power=300.0, temp=60, processes=()):
    snapshot = {
        "gpus": [
            {"uuid": g.uuid, "index": g.index, "utilization_gpu_pct": util + i,
             "memory_used_mib": mem, "power_w": power, "temperature_c": temp,
             "processes": list(processes)}
            for i, g in enumerate(cards)
        ]
    }  # fmt: skip
    rollups.buffer_samples({cards[0].node_id: snapshot}, {g.uuid: g.pk for g in cards}, at)


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
    rollups.buffer_samples({cards[0].node_id: snapshot}, {cards[0].uuid: cards[0].pk}, T0)
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
    usage = rollups.owner_usage([cards[0].pk], T0, T0 + timedelta(hours=1))
    assert [u["owner"] for u in usage] == ["carol", "dave"]


def test_samples_of_a_deleted_card_are_dropped_not_fatal(cards):
    sample(cards, T0, 10)
    cards[1].delete()
    assert rollups.flush(T0 + timedelta(minutes=1)) == 1


def test_series_for_several_cards_averages_utilization_and_sums_memory(cards):
    sample(cards, T0, 10, mem=1000)
    rollups.flush(T0 + timedelta(minutes=1))
    data = rollups.series([g.pk for g in cards], T0, T0 + timedelta(hours=1))
    assert data["resolution"] == "1m"
    [point] = data["points"]
    assert (point["gpus"], point["util_avg"], point["memory_used_avg_mib"]) == (2, 10.5, 2000)
    week = rollups.series([g.pk for g in cards], T0 - timedelta(days=6), T0 + timedelta(days=1))
    assert week["resolution"] == "1h" and week["points"][0]["util_max"] == 11


def test_retention_drops_only_rows_past_their_age(cards, settings):
    settings.ROLLUP_MINUTE_DAYS, settings.ROLLUP_HOUR_DAYS = 7, 400
    sample(cards, T0, 10)
    rollups.flush(T0 + timedelta(minutes=1))
    assert rollups.prune(T0 + timedelta(days=6)) == {"minutes": 0, "hours": 0}
    assert rollups.prune(T0 + timedelta(days=8)) == {"minutes": 2, "hours": 0}
    assert GpuHour.objects.count() == 2
    assert rollups.prune(T0 + timedelta(days=401)) == {"minutes": 0, "hours": 2}


def test_two_flushers_never_claim_the_same_minute(cards):
    sample(cards, T0, 10)
    first = rollups.buffer().claim(before=rollups.minute_of(T0) + 1)
    second = rollups.buffer().claim(before=rollups.minute_of(T0) + 1)
    assert len(first) == 1 and second == []


def test_a_claim_abandoned_by_a_dead_flusher_is_retried_later(cards):
    sample(cards, T0, 10)
    rollups.buffer().claim(before=rollups.minute_of(T0) + 1)  # the claimer dies here
    assert rollups.flush(T0 + timedelta(minutes=2)) == 0
    assert rollups.flush(T0 + timedelta(minutes=10)) == 2


def test_the_embedded_buffer_keeps_samples_in_process(cards, monkeypatch):
    monkeypatch.setattr(rollups, "_buffer", rollups._MemoryBuffer())
    sample(cards, T0, 10)
    assert rollups.flush(T0 + timedelta(minutes=1)) == 2
    assert rollups.flush(T0 + timedelta(minutes=1)) == 0


EMBEDDED_FLUSH = """
import django, json
django.setup()
from datetime import UTC, datetime, timedelta
from django.core.management import call_command
call_command("migrate", verbosity=0)
from agents import rollups
from agents.models import GPU, GpuHour, Node
node = Node.objects.create(name="n")
gpu = GPU.objects.create(node=node, index=0, uuid="GPU-0", model="T4")
t0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
for minute, util in [(0, 10), (1, 30)]:
    snap = {"gpus": [{"uuid": "GPU-0", "index": 0, "utilization_gpu_pct": util}]}
    rollups.buffer_samples({node.pk: snap}, {"GPU-0": gpu.pk}, t0 + timedelta(minutes=minute))
    rollups.flush(t0 + timedelta(minutes=minute + 1))
hour = GpuHour.objects.get()
print(json.dumps([hour.samples, hour.util_avg, hour.util_max, hour.power_avg_w]))
"""


def test_flushing_works_on_the_embedded_sqlite_default(tmp_path):
    import json
    import subprocess

    from tests import procs

    env = procs.child_env(
        DATABASE_URL=None, REDIS_URL=None, SECRET_KEY=None, PORTAL_VAR_DIR=str(tmp_path),
        DJANGO_SETTINGS_MODULE="portal.settings",
    )  # fmt: skip
    result = subprocess.run(
        [procs.PYTHON, "-c", EMBEDDED_FLUSH], cwd=procs.REPO, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [2, 20.0, 30.0, None]
