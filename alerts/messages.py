"""Messages rendered for one delivery, in its channel's language."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from django.utils import formats, timezone, translation
from django.utils.translation import gettext as _

from alerts.choices import EventState, Severity
from alerts.models import Delivery
from alerts.transports import Message
from quotas.choices import NoticeKind
from quotas.interface import notice_text


def language_of(channel) -> str:
    return channel.language or settings.LANGUAGE_CODE


def render(delivery: Delivery) -> Message:
    with translation.override(language_of(delivery.channel)):
        if delivery.notice:
            return _notice_message(delivery)
        if delivery.event is None:
            return _test_message(delivery)
        return _event_message(delivery)


def _link(path: str) -> str:
    return f"{settings.PORTAL_BASE_URL}{path}" if settings.PORTAL_BASE_URL else ""


def _when(moment) -> str:
    return formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT")


def _test_message(delivery: Delivery) -> Message:
    channel = delivery.channel
    return Message(
        title=_("Test message from GPU Portal"),
        summary=_("Channel %(name)s works: this is how alerts will arrive here.")
        % {"name": channel.name},
        severity=Severity.INFO,
        state=EventState.RESOLVED,
        facts=((_("Channel"), channel.name), (_("Sent"), _when(timezone.now()))),
        url=_link(reverse("alerts:channel_detail", args=[channel.pk])),
        delivery_id=delivery.pk,
        data={"test": True, "channel": channel.pk},
    )


def _event_message(delivery: Delivery) -> Message:
    event = delivery.event
    state = EventState(event.state)
    title = {
        EventState.FIRING: _("Firing: %(rule)s"),
        EventState.ACKNOWLEDGED: _("Acknowledged: %(rule)s"),
        EventState.RESOLVED: _("Resolved: %(rule)s"),
    }[state] % {"rule": event.rule_name}
    facts = [
        (_("Severity"), Severity(event.severity).label),
        (_("State"), state.label),
        (_("Started"), _when(event.started_at)),
    ]
    if event.scope:
        facts.insert(0, (_("Scope"), event.scope))
    if event.resolved_at:
        facts.append((_("Resolved"), _when(event.resolved_at)))
    facts += [(str(key), str(value)) for key, value in sorted(event.labels.items())[:20]]
    return Message(
        title=title,
        summary=event.summary,
        severity=event.severity,
        state=event.state,
        facts=tuple((str(label), str(value)[:500]) for label, value in facts),
        delivery_id=delivery.pk,
        data={
            "event": {
                "id": event.pk,
                "rule": event.rule_key,
                "rule_name": event.rule_name,
                "severity": event.severity,
                "state": event.state,
                "scope": event.scope,
                "fingerprint": event.fingerprint,
                "labels": event.labels,
                "summary": event.summary,
                "started_at": event.started_at.isoformat(),
                "resolved_at": event.resolved_at.isoformat() if event.resolved_at else None,
            }
        },
    )


def _notice_message(delivery: Delivery) -> Message:
    notice = delivery.notice
    kind, request_id = str(notice.get("kind", "")), notice.get("request")
    label = NoticeKind(kind).label if kind in NoticeKind.values else kind
    facts = [(_("Request"), f"#{request_id}"), (_("Sent"), _when(delivery.created))]
    if notice.get("comment"):
        facts.append((_("Comment"), str(notice["comment"])[:500]))
    url = ""
    if isinstance(request_id, int):
        url = _link(reverse("requests:request_detail", args=[request_id]))
    return Message(
        title=_("GPU request #%(id)s: %(what)s") % {"id": request_id, "what": label},
        summary=notice_text(kind),
        severity=str(notice.get("severity", Severity.INFO)),
        state=EventState.RESOLVED,
        facts=tuple((str(k), str(v)) for k, v in facts),
        url=url,
        delivery_id=delivery.pk,
        data={"notice": {"kind": kind, "request": request_id,
                         "comment": str(notice.get("comment", ""))}},
    )  # fmt: skip
