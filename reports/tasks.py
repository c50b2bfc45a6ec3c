"""Beat's work for the reports (scheduled in settings.CELERY_BEAT_SCHEDULE). Each is
idempotent: the scan replaces its snapshot, the reclaim step acts once per lease and
warning."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from reports import accounting, digest, scan, services, takeback


# Late acks: the scan replaces its snapshot; warnings and releases are recorded per
# lease before the next step, so a run again after a lost worker repeats none.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def scan_and_reclaim() -> dict[str, int]:
    """Judge every allocation and card, then warn, withdraw and release per policy."""
    result = scan.scan(incremental=True)
    return {"allocations": result.allocations, "idle": result.idle, **services.reclaim()}


# Late acks: as the idle reclaim, one warning and one release per lease.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def take_back_borrowed() -> dict[str, int]:
    """Borrowed capacity another tenant needs for its guarantee: warn, withdraw, release."""
    return takeback.take_back()


# Late acks: the day's row (reports.digest.send_once) is claimed in the transaction that
# queues the deliveries, so a run again, or a second beat, sends nothing.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def send_idle_digest() -> int:
    """The daily idle report, as a signal for the alerts app to deliver; once a day from
    ``IDLE_DIGEST_HOUR`` on (0 and nothing sent before it or when today's went already)."""
    content = digest.send_due()
    return len(content["tenants"]) if content else 0


# Late acks: a day's rows are computed afresh and replaced, never added to.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def account_days() -> int:
    """Sum today and yesterday into the accounting's day rows (yesterday again, for the
    rollups that arrived late)."""
    today = timezone.localdate()
    return accounting.materialize_day(today - timedelta(days=1)) + accounting.materialize_day(today)
