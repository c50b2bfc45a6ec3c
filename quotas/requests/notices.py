"""Telling people about a request's steps: a Notice row per person (the list on their
page and the badge), a push to the live pages, and the ``request_event`` signal.

The rows are written in the caller's transaction. The push and the signal (which alerts
turns into e-mail and IM deliveries) are a Celery task sent after it commits, so nobody
hears of a change that was rolled back and the request's thread does not wait on them.
Each step carries a key and an outbox row (``SentNotice``): the task claims it with the
deliveries in one transaction, so a message handed out again (a lost worker, late acks)
mails nobody twice; then it pushes the step and marks it pushed. A step not pushed (its
message lost, its worker killed between the claim and the push) is sent again by the
sweep: the push is at least once. A push twice is harmless: each listener reads what it
shows again on a push (the pages their live part, a ``?wait=`` its request's row).
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import orjson
from asgiref.sync import async_to_sync
from celery import shared_task
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.outages import UNAVAILABLE
from quotas.choices import NoticeKind
from quotas.models import GpuRequest, Notice, SentNotice
from quotas.requests.signals import request_event

logger = logging.getLogger(__name__)
# A redelivered message comes back within the broker's visibility timeout (an hour by
# default); the keys are kept far longer, then pruned by the requests' sweep.
SENT_KEY_DAYS = 2
# A sweep sends at most this many untold steps again, in messages of this many steps.
RESEND_AT_MOST = 1000
RESEND_PER_MESSAGE = 50

# Everyone a platform admin: every tenant's events.
ALL_GROUP = "requests.all"

# What each kind says to the person told, worded when read in their own language.
TEXTS = {
    NoticeKind.CREATED: _("Your request was submitted and waits for approval."),
    NoticeKind.APPROVED: _("Your request was approved."),
    NoticeKind.AUTO_APPROVED: _("Your request was approved automatically (within the policy)."),
    NoticeKind.REJECTED: _("Your request was rejected."),
    NoticeKind.PLACED: _("Your GPUs are placed and ready to use."),
    NoticeKind.ESCALATED: _("A request waited too long for approval; the tenant admins are told."),
    NoticeKind.PENDING_EXPIRED: _("The request expired without a decision."),
    NoticeKind.EXPIRING: _("Your GPUs expire soon: extend the request or save your work."),
    NoticeKind.EXPIRED: _("Your GPUs expired and were released."),
    NoticeKind.RELEASED: _("The GPUs were released."),
    NoticeKind.CANCELLED: _("The request was cancelled."),
    NoticeKind.EXTENDED: _("The request was extended."),
    NoticeKind.EXTENSION_ASKED: _("The extension waits for an approver."),
    NoticeKind.EXTENSION_REJECTED: _("The extension was rejected."),
    NoticeKind.RESIZED: _("The GPUs were resized."),
    NoticeKind.TAKE_BACK: _(
        "These GPUs were lent above your tenant's guarantee and another tenant needs them "
        "now: they will be released at the end of the grace period."
    ),
    NoticeKind.TAKING_BACK: _(
        "Capacity lent to other tenants is being taken back for this request; it is placed "
        "when their grace period ends."
    ),
}  # fmt: skip


def user_group(user_id: int) -> str:
    return f"requests.user.{user_id}"


def tenant_group(tenant_id: int) -> str:
    return f"requests.tenant.{tenant_id}"


def text_of(kind: str) -> str:
    return str(TEXTS.get(kind, kind))


@dataclass
class _Batch:
    notices: list[Notice] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)


_batch: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar("notices", default=None)


@contextmanager
def batched() -> Iterator[None]:
    """Inside a transaction: the steps announced in the block are written in one INSERT
    and sent in one task message when the block ends without an error (a create that is
    approved and placed announces two). Nested blocks join the outer one."""
    if _batch.get() is not None:
        yield
        return
    batch = _Batch()
    token = _batch.set(batch)
    try:
        yield
    finally:
        _batch.reset(token)
    if batch.notices:
        Notice.objects.bulk_create(batch.notices)
    if batch.steps:
        SentNotice.objects.bulk_create(SentNotice(key=s["key"], step=s) for s in batch.steps)
        transaction.on_commit(lambda: _queue(batch.steps))


def announce(
    req: GpuRequest,
    kind: str,
    *,
    recipients: Iterable[int] | None = None,
    comment: str = "",
    watchers: Iterable[int] = (),
) -> None:
    """Tell ``recipients`` (default: the requester) of this step in the portal; after
    commit push it to the request's tenant, the recipients' and ``watchers``' pages, and
    send the signal (both in the worker, ``send_notices``)."""
    told = frozenset(recipients if recipients is not None else (req.requester_id,))
    rows = [Notice(recipient_id=uid, gpu_request=req, kind=kind, comment=comment) for uid in told]
    step = {
        "key": uuid.uuid4().hex, "request": req.pk, "tenant": req.tenant_id,
        "pool": req.pool_id, "state": req.state, "kind": kind,
        "requester": req.requester_id, "recipients": sorted(told),
        "users": sorted(told | {req.requester_id} | frozenset(watchers)), "comment": comment,
    }  # fmt: skip
    if (batch := _batch.get()) is not None:
        batch.notices += rows
        batch.steps.append(step)
        return
    Notice.objects.bulk_create(rows)
    SentNotice.objects.create(key=step["key"], step=step)
    transaction.on_commit(lambda: _queue([step]))


def _queue(steps: list[dict]) -> None:
    try:
        send_notices.delay(steps)
    except Exception:  # the broker is away: the step stands, the sweep sends it later
        logger.exception("notices of request %s not queued", steps[0]["request"])


def retry_in(retries: int) -> float | None:
    """Seconds until the next run of a message that found a store away, after ``retries``
    runs again so far: as a delivery is retried (ALERT_RETRY_BASE, doubling up to
    ALERT_RETRY_MAX); None once the waits add up to ALERT_RETRY_HORIZON."""
    waits = [min(settings.ALERT_RETRY_MAX, settings.ALERT_RETRY_BASE * 2**n)
             for n in range(retries + 1)]  # fmt: skip
    return waits[-1] if sum(waits) <= settings.ALERT_RETRY_HORIZON else None


# Late acks: each step is claimed by its key in the transaction that writes its
# deliveries, so a message run again after a lost worker mails nobody twice; a step
# whose push the lost worker did not mark done is pushed again (harmless).
@shared_task(
    bind=True, name="quotas.tasks.send_notices", acks_late=True, reject_on_worker_lost=True,
    ignore_result=True, max_retries=None,
)  # fmt: skip
def send_notices(self, steps: list[dict]) -> int:
    """Signal each step not yet told and push each not yet pushed; how many this run
    told or pushed."""
    try:
        return sum(_tell(step) for step in steps)
    except UNAVAILABLE as exc:
        # PostgreSQL restarting: the message ran once and failed, and the steps' e-mail,
        # IM and pushes were lost (tests/test_faults_under_load.py). Run it again later:
        # the steps told before the failure are claimed and skipped. Run in the process
        # (the embedded default has no broker) a retry would run at once: the sweep will.
        if self.request.is_eager or (countdown := retry_in(self.request.retries)) is None:
            raise
        raise self.retry(exc=exc, countdown=countdown) from exc


# The claim: the step's untold row (written with the step) marked told, or, for a message
# sent before steps had rows, a told row inserted with the step (its push still to do);
# nothing when it was told already. The step stays until it is pushed.
_CLAIM_SQL = (
    f"INSERT INTO {SentNotice._meta.db_table} AS t (key, sent_at, created, step) "  # noqa: S608
    "VALUES (%s, %s, %s, %s::jsonb) ON CONFLICT (key) DO UPDATE SET sent_at = EXCLUDED.sent_at "
    "WHERE t.sent_at IS NULL RETURNING key"
)


def _tell(step: dict) -> bool:
    key = uuid.UUID(step["key"])
    with transaction.atomic():
        with connection.cursor() as cursor:
            now = timezone.now()
            cursor.execute(_CLAIM_SQL, [key, now, now, orjson.dumps(step).decode()])
            claimed = cursor.fetchone() is not None
        if claimed:
            # The receivers' deliveries commit with the claim, or neither does.
            request_event.send_robust(
                sender=GpuRequest, request_id=step["request"], kind=step["kind"],
                tenant_id=step["tenant"], requester_id=step["requester"],
                recipient_ids=frozenset(step["recipients"]), comment=step["comment"],
            )  # fmt: skip
    unpushed = SentNotice.objects.filter(key=key, pushed_at=None)
    if not claimed and not unpushed.exists():
        return False  # told and pushed by an earlier run of this message
    # A worker lost here (or a push that fails: Redis away) leaves the step told and not
    # pushed; a run again, or the sweep, pushes it and mails nobody.
    event = {
        "request": step["request"], "tenant": step["tenant"], "pool": step["pool"],
        "state": step["state"], "kind": step["kind"],
    }  # fmt: skip
    publish(step["tenant"], step["users"], event)
    unpushed.update(pushed_at=timezone.now(), step=None)
    return True


def resend_untold(now=None) -> int:
    """Send again each step still not pushed NOTICE_RESEND_AFTER_S after it was written:
    its message was lost (Redis restarted empty, or away when the step committed; the
    step's commit answered as failed by a PostgreSQL going down, so its after-commit send
    never ran), or its worker died after the claim, before the push. The claim makes a
    step whose first message still comes, or that was told already, mail nobody again.
    How many."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.NOTICE_RESEND_AFTER_S)
    steps = list(
        SentNotice.objects.filter(pushed_at=None, created__lt=cutoff)
        .filter(step__isnull=False)
        .order_by("created")
        .values_list("step", flat=True)[:RESEND_AT_MOST]
    )
    for first in range(0, len(steps), RESEND_PER_MESSAGE):
        send_notices.delay(steps[first : first + RESEND_PER_MESSAGE])
    return len(steps)


def prune_sent(now=None) -> int:
    """Forget the keys of steps told more than SENT_KEY_DAYS ago, and the steps never
    told in that time (each sweep sent them again)."""
    cutoff = (now or timezone.now()) - timedelta(days=SENT_KEY_DAYS)
    old = Q(sent_at__lt=cutoff) | Q(sent_at=None, created__lt=cutoff)
    deleted, _rows = SentNotice.objects.filter(old).delete()
    return deleted


def announce_id(request_id: int, kind: str, *, comment: str = "") -> None:
    """``announce`` for the apps above quotas, which hold a request's id (the reports'
    take-back of borrowed capacity): the requester is told, in the caller's transaction."""
    announce(GpuRequest.objects.get(pk=request_id), kind, comment=comment)


def publish(tenant_id: int | None, user_ids: Iterable[int], event: dict) -> None:
    """Push ``event`` to the users' sockets and, when given, the tenant's approvers' and
    the platform admins'. Each socket then fetches what it shows through its page's own
    permission check, so the event itself carries only ids and a state."""
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "request.event", "text": orjson.dumps(event).decode()}
    groups = [user_group(uid) for uid in sorted(set(user_ids))]
    if tenant_id is not None:
        groups += [tenant_group(tenant_id), ALL_GROUP]
    async_to_sync(_send)(layer, groups, message)


async def _send(layer, groups: list[str], message: dict) -> None:
    for group in groups:
        await layer.group_send(group, message)


def unread_count(user) -> int:
    if not user.is_authenticated:
        return 0
    return Notice.objects.filter(recipient=user, read_at=None).count()


def mark_read(user, *, now=None) -> int:
    return Notice.objects.filter(recipient=user, read_at=None).update(read_at=now or timezone.now())
