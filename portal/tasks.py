"""The wiring layer's own periodic work."""

from celery import shared_task

from portal import idempotency


# Late acks: deleting keys that are too old is the same twice.
@shared_task(acks_late=True, reject_on_worker_lost=True)
def prune_idempotency_keys() -> int:
    return idempotency.prune()
