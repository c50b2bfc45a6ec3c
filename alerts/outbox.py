"""The delivery outbox: one row per message and channel, sent at least once.

The row is the truth; a Celery message only says "look at delivery N now". A worker
claims the row with one conditional UPDATE (unclaimed, or claimed longer ago than
ALERT_CLAIM_TIMEOUT: that worker died), so duplicate messages and racing workers are
harmless. Each try is logged (``DeliveryAttempt``). A transient error schedules the next
try with exponential backoff until the delivery is ALERT_RETRY_HORIZON old; a permanent
one fails the delivery and disables the channel with the reason. ``requeue_due`` (beat)
sends a message again for every row that is due but unclaimed: a message lost with a
broker or a worker costs a delay, never the alert.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext as _

from alerts.choices import DeliveryStatus
from alerts.messages import render
from alerts.models import Channel, Delivery, DeliveryAttempt, Event
from alerts.transports import TransportError, transport_for
from audit.interface import record

logger = logging.getLogger(__name__)
REQUEUE_BATCH = 1000


def enqueue(
    channel_id: int, *, event_id: int | None, notice: dict | None = None, not_before=None
) -> int:
    """A pending delivery, sent once the surrounding transaction commits; one held until
    ``not_before`` (quiet hours) is sent by the requeue task when it is due."""
    now = timezone.now()
    held = not_before is not None and not_before > now
    delivery = Delivery.objects.create(
        channel_id=channel_id, event_id=event_id, notice=notice,
        test=event_id is None and notice is None,
        next_attempt_at=not_before if held else now,
    )  # fmt: skip
    if not held:
        transaction.on_commit(lambda: _send_task(delivery.pk, 0))
    return delivery.pk


def _send_task(delivery_id: int, countdown: float) -> None:
    if countdown > 0 and settings.CELERY_TASK_ALWAYS_EAGER:
        return  # in-process tasks ignore countdowns: the embedded beat's requeue sends it
    deliver_task.apply_async((delivery_id,), countdown=countdown or None)


def backoff(attempt: int) -> float:
    """Seconds before try ``attempt + 1``: base, doubling, capped."""
    return min(settings.ALERT_RETRY_BASE * 2 ** max(attempt - 1, 0), settings.ALERT_RETRY_MAX)


def claim(delivery_id: int) -> Delivery | None:
    now = timezone.now()
    stale = now - timedelta(seconds=settings.ALERT_CLAIM_TIMEOUT)
    # A claim left by a worker that died mid-try: that try is logged once this one holds it.
    abandoned = (
        Delivery.objects.filter(pk=delivery_id, claimed_at__lt=stale)
        .values_list("claimed_at", flat=True)
        .first()
    )
    taken = Delivery.objects.filter(
        Q(claimed_at__isnull=True) | Q(claimed_at__lt=stale),
        pk=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now,
    ).update(claimed_at=now, attempts=F("attempts") + 1)  # fmt: skip
    if taken != 1:
        return None
    delivery = Delivery.objects.select_related("channel", "event").get(pk=delivery_id)
    if abandoned is not None and delivery.attempts > 1:
        _log_lost_attempt(delivery, delivery.attempts - 1, abandoned)
    return delivery


def _log_lost_attempt(delivery: Delivery, number: int, started_at) -> None:
    """The try whose worker was lost (SIGKILL, OOM, the machine) before it could record it:
    counted in ``attempts``, so logged too; the receiver may have had it (at least once).
    A worker that was only slow and records its try later replaces this row (``_record``)."""
    DeliveryAttempt.objects.get_or_create(
        delivery=delivery, number=number,
        defaults={
            "started_at": started_at, "duration_ms": 0, "ok": False,
            "error": _("The worker sending this attempt was lost before it recorded the outcome."),
        },
    )  # fmt: skip


def deliver(delivery_id: int) -> str:
    """Try the delivery once if it is due and nobody holds it; what became of it."""
    delivery = claim(delivery_id)
    if delivery is None:
        return "skipped"
    channel = delivery.channel
    if not channel.enabled:
        _close(delivery, DeliveryStatus.CANCELLED, _("Channel disabled."))
        return DeliveryStatus.CANCELLED
    started_at = timezone.now()
    clock = time.monotonic()
    error: TransportError | None = None
    try:
        transport_for(channel).notify(render(delivery))
    except TransportError as exc:
        error = exc
    except Exception as exc:  # a bug or an unreadable secret: logged, retried, shown
        logger.exception("delivery %s to channel %s failed", delivery.pk, channel.pk)
        error = TransportError(f"{type(exc).__name__}: {exc}")
    duration_ms = int((time.monotonic() - clock) * 1000)
    return _record(delivery, started_at, duration_ms, error)


# The task lives with the outbox that sends it, so the outbox needs nothing above it;
# alerts.tasks names it, under the name workers and queued messages know.
# Late acks: safe, as the claim (one conditional UPDATE) lets one worker at a time try a
# delivery and a delivered one is never tried again; the receiver may see a message
# twice only when a worker died mid-send (at least once).
@shared_task(
    name="alerts.tasks.deliver", acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def deliver_task(delivery_id: int) -> str:
    return deliver(delivery_id)


def _record(delivery: Delivery, started_at, duration_ms: int, error: TransportError | None) -> str:
    with transaction.atomic():
        # update_or_create: a try that outlived its claim may find itself logged as lost.
        DeliveryAttempt.objects.update_or_create(
            delivery=delivery, number=delivery.attempts,
            defaults={
                "started_at": started_at, "duration_ms": duration_ms, "ok": error is None,
                "permanent": bool(error and error.permanent),
                "error": error.message if error else "",
            },
        )  # fmt: skip
        if error is None:
            _close(delivery, DeliveryStatus.DELIVERED, "")
            if delivery.event_id:
                Event.objects.filter(pk=delivery.event_id).update(last_notified_at=timezone.now())
            return DeliveryStatus.DELIVERED
        if error.permanent:
            _close(delivery, DeliveryStatus.FAILED, error.message)
            disable_channel(delivery.channel_id, error.message)
            return DeliveryStatus.FAILED
        age = (timezone.now() - delivery.created).total_seconds()
        if age >= settings.ALERT_RETRY_HORIZON:
            reason = _("Gave up after %(n)s attempts: %(error)s") % {
                "n": delivery.attempts, "error": error.message}  # fmt: skip
            _close(delivery, DeliveryStatus.FAILED, reason)
            return DeliveryStatus.FAILED
        delay = backoff(delivery.attempts)
        mine = Delivery.objects.filter(pk=delivery.pk, claimed_at=delivery.claimed_at)
        if mine.update(
            claimed_at=None, last_error=error.message,
            next_attempt_at=timezone.now() + timedelta(seconds=delay),
        ):  # fmt: skip
            transaction.on_commit(lambda: _send_task(delivery.pk, delay))
        return "retry"


def _close(delivery: Delivery, status: str, error: str) -> None:
    # Only while the claim is still ours: a worker that outlived its claim records its
    # attempt but leaves the row to whoever took it over.
    Delivery.objects.filter(pk=delivery.pk, claimed_at=delivery.claimed_at).update(
        status=status, claimed_at=None, finished_at=timezone.now(), last_error=error
    )


def disable_channel(channel_id: int, reason: str) -> bool:
    """Turn the channel off after a permanent error (audited, by the system)."""
    with transaction.atomic():
        channel = Channel.objects.select_for_update().filter(pk=channel_id, enabled=True).first()
        if channel is None:
            return False
        channel.enabled = False
        channel.disabled_reason = reason[:2000]
        channel.save(update_fields=["enabled", "disabled_reason", "updated"])
        record(
            "alerts.channel.disable", channel, tenant_id=channel.tenant_id,
            before={"enabled": True}, after={"enabled": False}, message=reason[:500],
        )  # fmt: skip
    return True


def requeue_due() -> list[int]:
    """Send a message again for each due, unclaimed (or abandoned) delivery."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.ALERT_CLAIM_TIMEOUT)
    due = list(
        Delivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=stale))
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:REQUEUE_BATCH]
    )
    for delivery_id in due:
        _send_task(delivery_id, 0)
    return due
