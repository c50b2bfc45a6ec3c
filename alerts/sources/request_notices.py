"""GPU request notices (``quotas.interface.request_event``) to the people concerned,
through their own channels that subscribe the "GPU request notices" rule, each written
in its channel's language."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from alerts.choices import Severity
from alerts.defaults import REQUEST_NOTICE_RULE
from alerts.models import Rule
from alerts.recipients import route_notice
from quotas.choices import NoticeKind

logger = logging.getLogger(__name__)
# Steps that need the reader to act, or that took something away.
WARNING_KINDS = frozenset({
    NoticeKind.REJECTED, NoticeKind.ESCALATED, NoticeKind.PENDING_EXPIRED,
    NoticeKind.EXPIRING, NoticeKind.EXPIRED, NoticeKind.EXTENSION_REJECTED,
})  # fmt: skip


def deliver_notice(
    *, request_id: int, kind: str, recipient_ids: Iterable[int], comment: str = ""
) -> list[int]:
    """Deliveries of one request step to each recipient's subscribed channels."""
    rule = Rule.objects.filter(key=REQUEST_NOTICE_RULE).values_list("pk", "enabled").first()
    if rule is None or not rule[1]:
        return []
    severity = Severity.WARNING if kind in WARNING_KINDS else Severity.INFO
    notice = {"kind": kind, "request": request_id, "comment": comment[:2000],
              "severity": severity}  # fmt: skip
    return route_notice(recipient_ids, notice, severity, rule[0])


def on_request_event(sender, *, request_id: int, kind: str, recipient_ids=(), comment: str = "",
                     **kwargs) -> None:  # fmt: skip
    try:
        deliver_notice(request_id=request_id, kind=kind, recipient_ids=recipient_ids,
                       comment=comment)  # fmt: skip
    except Exception:  # the request's step stands; its notice is logged as lost
        logger.exception("notice %s of request %s not queued", kind, request_id)
