"""Delivery tasks. ``deliver`` acknowledges late and is requeued if its worker dies, so a
message is never lost with a worker; the outbox row's claim makes a second run harmless.
It is defined in ``alerts.outbox``, which sends it: nothing below imports this module."""

from __future__ import annotations

from celery import shared_task

from alerts import outbox
from alerts.outbox import deliver_task as deliver

__all__ = ["deliver", "evaluate_business", "requeue_deliveries"]


# Late acks: it only sends "look at delivery N" messages again; the outbox claim makes a
# duplicate message a no-op.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def requeue_deliveries() -> int:
    return len(outbox.requeue_due())


# Late acks: events fire and clear by fingerprint (one open event per condition), so a
# run again finds them open and notifies no one twice.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def evaluate_business() -> int:
    """Business-state rules: requests pending, quotas used, allocations expiring."""
    from alerts.sources.business import evaluate_business as run

    return run()
