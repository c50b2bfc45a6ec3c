"""Messages rendered for one delivery, in its channel's language: the one set on the
channel, else (a person's own channel) the language and time zone its owner chose on the
Account page, else the site's."""

from __future__ import annotations

from django.conf import settings
from django.urls import reverse
from django.utils import formats, timezone, translation
from django.utils.translation import gettext as _

from alerts.choices import EventState, NoticeTopic, Severity
from alerts.models import Delivery
from alerts.transports import Message
from quotas.choices import NoticeKind
from quotas.interface import Preferences, notice_text, preferences_of
from reports.models import ReclaimWarning

DIGEST_FACTS = 20  # lines of a digest message; the idle page has the rest


def reader_settings(channel) -> tuple[str, str]:
    """(language, time zone) of the channel's messages. A tenant's channel reaches many
    people: the site's defaults there, unless a language is set on it."""
    chosen = preferences_of(channel.owner_id) if channel.owner_id else Preferences()
    language = channel.language or chosen.language or settings.LANGUAGE_CODE
    return language, chosen.effective_time_zone


def language_of(channel) -> str:
    return reader_settings(channel)[0]


def render(delivery: Delivery) -> Message:
    language, zone = reader_settings(delivery.channel)
    with translation.override(language), timezone.override(zone):
        if delivery.notice:
            topic = delivery.notice.get("topic")
            if topic == NoticeTopic.RECLAIM:
                return reclaim_message(delivery)
            if topic == NoticeTopic.DIGEST:
                return digest_message(delivery)
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
    }[state] % {"rule": event.rule_label}
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
    summary = event.summary_text  # in the channel's language, like the rest
    return Message(
        title=title,
        summary=summary,
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
                "summary": summary,
                "summary_key": event.summary_key,
                "summary_params": event.summary_params,
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


def _reclaim_texts(step: str) -> tuple[str, str]:
    """(title, summary) of a reclaim step, translated now (the channel's language)."""
    return {
        "warned": (
            _("Idle GPUs to be taken back: lease #%(lease)s"),
            _("Lease #%(lease)s of %(owner)s in pool %(pool)s is idle. It will be released "
              "after %(when)s unless it is used again, exempted, or an appeal is granted."),
        ),
        "reclaimed": (
            _("Idle GPUs taken back: lease #%(lease)s"),
            _("Lease #%(lease)s of %(owner)s in pool %(pool)s stayed idle and was released."),
        ),
        "appealed": (
            _("Appeal against a reclaim: lease #%(lease)s"),
            _("%(owner)s appealed against the reclaim of lease #%(lease)s in pool %(pool)s; "
              "an approver of the tenant decides."),
        ),
        "granted": (
            _("Appeal granted: lease #%(lease)s"),
            _("The appeal was granted: lease #%(lease)s of %(owner)s is kept."),
        ),
        "refused": (
            _("Appeal refused: lease #%(lease)s"),
            _("The appeal was refused: lease #%(lease)s of %(owner)s will be released after "
              "%(when)s."),
        ),
    }.get(step, (_("Reclaim of lease #%(lease)s"), ""))  # fmt: skip


def reclaim_message(delivery: Delivery) -> Message:
    notice = delivery.notice
    step = str(notice.get("kind", ""))
    warning = (
        ReclaimWarning.objects.select_related("lease__pool", "lease__holder")
        .filter(pk=notice.get("warning"))
        .first()
    )
    title, summary = _reclaim_texts(step)
    values = {"lease": notice.get("lease"), "owner": "?", "pool": "?", "when": "?"}
    facts = []
    if warning is not None:
        lease = warning.lease
        values.update(owner=lease.holder.get_username(), pool=lease.pool.name,
                      when=_when(warning.release_after))  # fmt: skip
        facts += [(_("Pool"), lease.pool.name), (_("Owner"), values["owner"])]
        if lease.node_name:
            facts.append((_("Node"), lease.node_name))
        if step in ("warned", "refused"):
            facts.append((_("Released after"), values["when"]))
        if warning.appeal_reason:
            facts.append((_("Appeal"), warning.appeal_reason))
        if warning.decision_comment:
            facts.append((_("Comment"), warning.decision_comment))
    return Message(
        title=title % values,
        summary=summary % values,
        severity=str(notice.get("severity", Severity.INFO)),
        state=EventState.RESOLVED,
        facts=tuple((str(k), str(v)[:500]) for k, v in facts),
        url=_link(reverse("reports:idle_report")),
        delivery_id=delivery.pk,
        data={"notice": {"topic": "reclaim", "kind": step, "warning": notice.get("warning"),
                         "lease": notice.get("lease")}},
    )  # fmt: skip


def digest_message(delivery: Delivery) -> Message:
    notice = delivery.notice
    digest = notice.get("digest") or {}
    tenants = digest.get("tenants") or []
    count = sum(int(t.get("count", 0)) for t in tenants)
    wasted = sum(float(t.get("wasted_gpu_hours", 0)) for t in tenants)
    facts: list[tuple[str, str]] = []
    for tenant in tenants:
        name = tenant.get("tenant") or _("No tenant")
        facts.append(
            (
                str(name),
                _("%(count)s idle, %(hours)s GPU-hours wasted")
                % {
                    "count": tenant.get("count", 0),
                    "hours": formats.number_format(tenant.get("wasted_gpu_hours", 0), 1),
                },
            )
        )
        for row in tenant.get("allocations", []):
            if len(facts) >= DIGEST_FACTS:
                break
            facts.append(
                (
                    _("Allocation #%(id)s (%(owner)s, %(pool)s)")
                    % {
                        "id": row.get("allocation_id"),
                        "owner": row.get("owner"),
                        "pool": row.get("pool"),
                    },
                    _("idle %(idle)s h, %(hours)s GPU-hours wasted")
                    % {
                        "idle": formats.number_format(row.get("idle_hours", 0), 1),
                        "hours": formats.number_format(row.get("wasted_gpu_hours", 0), 1),
                    },
                )
            )
    if "idle_cards" in digest:
        facts.append((_("Idle cards"), str(digest["idle_cards"])))
    return Message(
        title=_("Idle GPUs on %(day)s: %(hours)s GPU-hours wasted") % {
            "day": digest.get("day") or notice.get("day"),
            "hours": formats.number_format(wasted, 1)},
        summary=_("%(count)s idle allocations in %(tenants)s tenants.") % {
            "count": count, "tenants": len(tenants)},
        severity=Severity.INFO,
        state=EventState.RESOLVED,
        facts=tuple((str(k), str(v)[:500]) for k, v in facts[:DIGEST_FACTS + 1]),
        url=_link(reverse("reports:idle_report")),
        delivery_id=delivery.pk,
        data={"notice": {"topic": "digest", "day": notice.get("day"), "digest": digest}},
    )  # fmt: skip
