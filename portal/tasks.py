"""The wiring layer's own periodic work."""

from celery import shared_task

from portal import idempotency


@shared_task
def prune_idempotency_keys() -> int:
    return idempotency.prune()
