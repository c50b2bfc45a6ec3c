"""Telling people about a request's steps: a Notice row per person (the list on their
page and the badge), a push to the live pages, and the ``request_event`` signal.

The rows are written in the caller's transaction; the push and the signal go out after
it commits, so nobody hears of a change that was rolled back.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from quotas.choices import NoticeKind
from quotas.models import GpuRequest, Notice
from quotas.requests.signals import request_event

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
    send the signal."""
    told = frozenset(recipients if recipients is not None else (req.requester_id,))
    Notice.objects.bulk_create(
        [Notice(recipient_id=uid, gpu_request=req, kind=kind, comment=comment) for uid in told]
    )
    event = {
        "request": req.pk, "tenant": req.tenant_id, "pool": req.pool_id,
        "state": req.state, "kind": kind,
    }  # fmt: skip
    users = told | {req.requester_id} | frozenset(watchers)
    details = {
        "request_id": req.pk, "kind": kind, "tenant_id": req.tenant_id,
        "requester_id": req.requester_id, "recipient_ids": told, "comment": comment,
    }  # fmt: skip

    def after_commit() -> None:
        publish(req.tenant_id, users, event)
        request_event.send_robust(sender=GpuRequest, **details)

    transaction.on_commit(after_commit)


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
