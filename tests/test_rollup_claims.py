"""The sample buffer's claims under failure and race: abandoned and retried claims, a claim
whose merge fails, flushers killed after any Redis command, flushers racing each other,
and the order in which merges lock their rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from telemetry import rollup_sql, rollups, sample_buffer
from telemetry.models import GpuMinute, OwnerMinute
from tests import test_rollups
from tests.test_rollups import T0, _hour, sample

pytestmark = pytest.mark.django_db

cards = test_rollups.cards  # the fixture, shared


def test_two_flushers_never_claim_the_same_minute(cards, store):
    sample(cards, T0, 10)
    first = sample_buffer.buffer().claim(before=sample_buffer.minute_of(T0) + 1)
    second = sample_buffer.buffer().claim(before=sample_buffer.minute_of(T0) + 1)
    assert len(first) == 1 and second == []


def test_a_claim_abandoned_by_a_dead_flusher_is_retried_later(cards, store):
    sample(cards, T0, 10)
    sample_buffer.buffer().claim(before=sample_buffer.minute_of(T0) + 1)  # the claimer dies here
    assert rollups.flush(T0 + timedelta(minutes=2)) == 0
    assert rollups.flush(T0 + timedelta(minutes=10)) == 2


def test_a_claim_retried_after_its_commit_is_not_merged_twice(cards, monkeypatch, store):
    sample(cards, T0, 10)
    source = sample_buffer.buffer()
    # The flusher dies between its commit and deleting the claim from the buffer.
    monkeypatch.setattr(source, "done", lambda claim_key: None)
    assert rollups.flush(T0 + timedelta(minutes=1)) == 2
    monkeypatch.undo()
    assert source.client.keys(f"{source.prefix}:claim:*")
    # Another flusher retries the abandoned claim, finds it merged, and drops it.
    assert rollups.flush(T0 + timedelta(minutes=10)) == 0
    assert GpuMinute.objects.get(gpu=cards[0]).samples == 1
    assert _hour(cards[0]) == (1, 10.0, 10.0)
    assert not source.client.keys(f"{source.prefix}:claim:*")


@pytest.mark.django_db(transaction=True)
def test_a_minute_written_meanwhile_by_another_flusher_is_merged_not_lost(cards):
    import threading
    import time

    import psycopg

    sample(cards, T0, 10)
    # Another flusher's claim of the same minute: written, not committed yet, so this
    # flush finds the minute empty, inserts, and waits on the other's rows.
    other = psycopg.connect(**connection.get_connection_params())
    other.execute(
        "INSERT INTO telemetry_gpuminute (gpu_id, bucket, samples, util_avg, util_max) "
        "VALUES (%s, %s, 1, 30, 30)",
        [cards[0].pk, T0],
    )
    written: list[int] = []

    def flush() -> None:
        try:
            written.append(rollups.flush(T0 + timedelta(minutes=1)))
        finally:
            connection.close()

    flusher = threading.Thread(target=flush)
    flusher.start()
    try:
        deadline = time.monotonic() + 30
        with connection.cursor() as cursor:
            while True:  # until the flush waits on the other's uncommitted rows
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
                if cursor.fetchone()[0] or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        other.commit()
        flusher.join(30)
    finally:
        other.close()
        with connection.cursor() as cursor:  # not a model table: the test flush keeps it
            cursor.execute("DELETE FROM telemetry_rollupclaim")
    assert written == [2]
    first = GpuMinute.objects.get(gpu=cards[0])
    assert (first.samples, first.util_avg, first.util_max) == (2, 20.0, 30.0)
    assert GpuMinute.objects.get(gpu=cards[1]).samples == 1


def _corrupt_blob(card) -> bytes:
    """A blob from another source that PostgreSQL refuses and Python cannot aggregate."""
    first = sample_buffer.SAMPLE_FIELDS[0]
    return f'gpu_id=[{card.pk}]\t{first}=["x"]'.encode()


def _claims(source) -> list[str]:
    return [key.decode() for key in source.client.keys(f"{source.prefix}:claim:*")]


def test_a_claim_whose_merge_fails_holds_up_neither_other_minutes_nor_the_fold(
    cards, caplog, store
):
    source = sample_buffer.buffer()
    sample(cards, T0, 10)
    rollups.flush(T0 + timedelta(minutes=1))  # hours folded from minute 1 on
    source.append(sample_buffer.minute_of(T0) + 1, _corrupt_blob(cards[0]))
    sample(cards, T0 + timedelta(minutes=1), 20)
    sample(cards, T0 + timedelta(minutes=2), 30)
    assert rollups.flush(T0 + timedelta(minutes=rollups.FOLD_EVERY)) == 2  # minute 2
    assert "not merged" in caplog.text and "2026-11-30 10:01" in caplog.text
    assert not GpuMinute.objects.filter(bucket=T0 + timedelta(minutes=1)).exists()
    assert _hour(cards[0]) == (2, 20.0, 30.0)  # minutes 0 and 2: the fold ran
    [failed] = _claims(source)
    # Retried with the stale claims, failing again, until its data is about to expire.
    caplog.clear()
    assert rollups.flush(T0 + timedelta(minutes=rollups.FOLD_EVERY + 6)) == 0
    assert "not merged" in caplog.text and _claims(source) == [failed]
    source.client.expire(failed, sample_buffer.GIVE_UP_TTL_S - 1)
    caplog.clear()
    assert rollups.flush(T0 + timedelta(minutes=rollups.FOLD_EVERY + 7)) == 0
    assert [r.levelname for r in caplog.records] == ["ERROR", "ERROR"]
    assert "dropped" in caplog.records[1].getMessage()
    assert _claims(source) == []


def test_a_flusher_killed_after_any_redis_command_loses_no_minute(cards, monkeypatch):
    import redis

    class Killed(Exception):
        pass

    real = redis.Redis.execute_command

    def dies_after_command(n: int):
        issued = 0

        def execute_command(self, *args, **options):
            nonlocal issued
            result = real(self, *args, **options)
            issued += 1
            if issued == n:
                raise Killed
            return result

        return execute_command

    for dies_after in range(1, 30):  # the flusher dies right after its n-th Redis command
        at = T0 + timedelta(hours=dies_after)
        sample(cards, at, 10)
        killed = dies_after_command(dies_after)
        monkeypatch.setattr(redis.Redis, "execute_command", killed)
        try:
            rollups.flush(at + timedelta(minutes=1))
            survived = True
        except Killed:
            survived = False
        monkeypatch.undo()
        rollups.flush(at + timedelta(minutes=10))  # retries what was left stale
        assert GpuMinute.objects.get(gpu=cards[0], bucket=at).samples == 1, dies_after
        if survived:  # past the last command: every point of the flush was tried
            break
    assert survived


def test_two_flushers_claiming_at_once_never_share_a_minute(cards, store):
    import threading

    minutes = range(sample_buffer.minute_of(T0), sample_buffer.minute_of(T0) + 200)
    for minute in minutes:
        sample_buffer.buffer().append(minute, b"blob")
    start = threading.Barrier(2)
    claims: list[list] = [[], []]

    def claimer(mine: list) -> None:
        source = sample_buffer._RedisBuffer()  # another worker's
        start.wait()
        mine.extend(source.claim(before=minutes[-1] + 1))

    threads = [threading.Thread(target=claimer, args=(c,)) for c in claims]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    first, second = ({minute for minute, _, _ in c} for c in claims)
    assert not first & second and first | second == set(minutes)
    assert all(blobs == [b"blob"] for c in claims for _, _, blobs in c)


def test_merges_write_a_cards_owner_rows_in_one_order_whatever_the_samples_order(cards):
    # Two merges of one minute lock its rows in the order they write them: the same
    # order for both, or they can deadlock.
    import json

    import psycopg

    statement = rollup_sql.statements().merge[OwnerMinute][False, True]
    select = statement.split(" INSERT INTO")[0] + " SELECT gpu_id, owner FROM live"  # noqa: S608
    owners = [f"user{i}" for i in range(6)]

    def array(values) -> str:
        return "{" + ",".join(values) + "}"

    def written(names: list[str]) -> list[tuple]:
        pairs = [(g.pk, name) for g in reversed(cards) for name in names]
        params = {
            "ids": array(str(pk) for pk, _ in pairs),
            "owners": json.dumps([name for _, name in pairs]),
            **{v: array("1" for _ in pairs) for v in rollup_sql.OWNER_PARAMS},
        }
        cursor = psycopg.Cursor(connection.connection)
        cursor.execute(select, params)
        return cursor.fetchall()

    expected = sorted((g.pk, name) for g in cards for name in owners)
    assert written(owners) == written(owners[::-1]) == expected
