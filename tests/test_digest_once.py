"""The daily digest is sent once per day, guarded by the database rather than by beat's
schedule file: two runs at once (two beats, a redelivered task) on real PostgreSQL, and a
run again later, send one digest."""

from __future__ import annotations

import threading
import time
from datetime import date, datetime, timedelta

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.utils import timezone

from alerts.models import Delivery
from reports import digest
from reports.interface import idle_digest
from reports.models import DigestSent
from reports.tasks import send_idle_digest
from tests.test_alert_reports import email_channel


@pytest.fixture
def heard():
    """Each digest signal sent; the receiver lingers so that a second run overlaps the
    first one's open transaction."""
    calls: list[dict] = []

    def receiver(sender, **kwargs):
        calls.append(kwargs)
        time.sleep(0.5)

    idle_digest.connect(receiver, weak=False, dispatch_uid="test-digest-once")
    yield calls
    idle_digest.disconnect(dispatch_uid="test-digest-once")


def _run_together(count: int) -> list:
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            results[i] = send_idle_digest.apply(throw=True).get()
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()  # each thread's own connection to PostgreSQL

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return results


@pytest.mark.django_db(transaction=True)
def test_two_runs_at_once_send_one_digest(alice, heard, settings):
    settings.IDLE_DIGEST_HOUR = 0  # due at any hour: the test must not depend on the clock
    channel_id = email_channel(alice, "alice@example.com", rules=["idle-digest"])
    results = _run_together(2)
    assert len(heard) == 1, "both runs sent the digest"
    assert sorted(results) == [0, 0]  # no idle tenant today: each says 0 tenants
    [row] = DigestSent.objects.all()
    assert row.name == digest.DIGEST_NAME and row.recipients >= 1
    # The alerts app's deliveries were queued in the claiming transaction: one mail.
    assert Delivery.objects.filter(channel_id=channel_id).count() == 1

    # A run again later the same day (beat restarted, the task redelivered): nothing.
    assert send_idle_digest.apply(throw=True).get() == 0
    assert len(heard) == 1 and Delivery.objects.filter(channel_id=channel_id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_each_day_is_sent_once_and_a_failed_send_claims_nothing(alice, heard):
    assert digest.send_once(date(2026, 12, 1)) is not None
    assert digest.send_once(date(2026, 12, 1)) is None
    assert digest.send_once(date(2026, 12, 2)) is not None
    assert len(heard) == 2

    def broken(sender, **kwargs):
        raise RuntimeError("boom")

    idle_digest.connect(broken, weak=False, dispatch_uid="test-digest-broken")
    try:
        with pytest.raises(RuntimeError):
            digest.send_once(date(2026, 12, 3))
    finally:
        idle_digest.disconnect(dispatch_uid="test-digest-broken")
    # Rolled back with the send: the next run sends that day's digest.
    assert not DigestSent.objects.filter(period="2026-12-03").exists()
    assert digest.send_once(date(2026, 12, 3)) is not None


@pytest.mark.django_db(transaction=True)
def test_the_digest_waits_for_its_hour_then_a_missed_one_is_caught_up(alice, heard, settings):
    settings.IDLE_DIGEST_HOUR = 8
    tz = timezone.get_current_timezone()
    # Before the hour: nothing sent, nothing claimed.
    assert digest.send_due(datetime(2026, 12, 4, 7, 59, tzinfo=tz)) is None
    assert not DigestSent.objects.exists() and heard == []
    # Beat (or Redis) was away at 08:00: the check at 10:20 sends that day's digest...
    sent = digest.send_due(datetime(2026, 12, 4, 10, 20, tzinfo=tz))
    assert sent is not None and sent["day"] == "2026-12-04"
    # ...and the checks after it send nothing more that day, the next day's at its hour.
    assert digest.send_due(datetime(2026, 12, 4, 23, 50, tzinfo=tz)) is None
    assert digest.send_due(datetime(2026, 12, 5, 7, 0, tzinfo=tz)) is None
    assert digest.send_due(datetime(2026, 12, 5, 8, 0, tzinfo=tz)) is not None
    assert [c["day"] for c in heard] == ["2026-12-04", "2026-12-05"]
    assert sorted(DigestSent.objects.values_list("period", flat=True)) == [
        "2026-12-04", "2026-12-05",
    ]  # fmt: skip


def test_beat_checks_the_digest_often_rather_than_once_at_its_hour():
    entry = django_settings.CELERY_BEAT_SCHEDULE["idle-digest"]
    assert entry["schedule"] == timedelta(seconds=django_settings.IDLE_DIGEST_CHECK_EVERY_S)
    # A check queued while no worker was up is dropped, not run late alongside the next one.
    assert entry["options"]["expires"] == django_settings.IDLE_DIGEST_CHECK_EVERY_S
