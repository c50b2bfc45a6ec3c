"""An event's life: fire, re-notify, resolve, acknowledge; each step sent to subscribers
as the rule says.

- **De-duplication.** One open event per fingerprint (the rule and its target): firing
  again updates it.
- **Re-notify.** A firing event is sent when it opens and again each ``renotify_seconds``
  while it stays firing (0: once). Acknowledged events are not re-sent.
- **Flapping.** An event that resolved less than ``renotify_seconds`` ago and fires again
  is reopened without a new message; it is sent again when the interval has passed. Its
  resolution is sent only if its firing was. So a card that crosses its threshold every
  minute costs its subscribers at most one firing and one resolved message per interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from alerts import live, recipients, summaries
from alerts.choices import OPEN_EVENT_STATES, EventState
from alerts.evaluate import RuleSpec
from alerts.models import Event
from audit.interface import record

# An open event's last_seen_at is refreshed at least this often while its rule holds.
SEEN_EVERY_S = 60


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One target a rule holds for, as the event shows it: its summary as a key of
    ``alerts.summaries`` and parameters (written in each reader's language), or as text
    (another system's, such as Alertmanager's)."""

    fingerprint: str
    scope: str
    summary: str = ""
    labels: dict[str, Any] = field(default_factory=dict)
    tenant_id: int | None = None
    summary_key: str = ""
    summary_params: dict[str, Any] = field(default_factory=dict)
    state_key: str = ""

    def summary_fields(self) -> dict[str, Any]:
        """The event's summary columns (and its evaluation key, which moves with them)."""
        return {"summary_key": self.summary_key[:64], "summary_params": self.summary_params,
                "summary": summaries.stored_text(self.summary_key, self.summary_params,
                                                 self.summary),
                "state_key": self.state_key[:200]}  # fmt: skip


def _due(event: Event, rule: RuleSpec, now: datetime) -> bool:
    if event.state != EventState.FIRING:
        return False
    if event.routed_at is None:
        return True
    if event.routed_state == EventState.FIRING and not rule.renotify_seconds:
        return False
    return (now - event.routed_at).total_seconds() >= rule.renotify_seconds


def next_check(event: Event, rule: RuleSpec, now: datetime) -> float:
    """When the cycle should look at this open event again (a Unix time)."""
    soon = now.timestamp() + SEEN_EVERY_S
    if event.state == EventState.FIRING and event.routed_at and rule.renotify_seconds:
        return min(soon, event.routed_at.timestamp() + rule.renotify_seconds)
    return soon


def fire(rule: RuleSpec, what: Occurrence, *, now: datetime | None = None) -> tuple[int, float]:
    """Open, reopen or keep open the rule's event for this target, and send it when it
    is due. (event id, when to look again)."""
    now = now or timezone.now()
    for _attempt in range(3):
        try:
            with transaction.atomic():
                event = _open_or_reopen(rule, what, now)
                if _due(event, rule, now):
                    recipients.route(event.pk, now=now)
                    event.refresh_from_db(fields=["routed_at", "routed_state"])
                return event.pk, next_check(event, rule, now)
        except IntegrityError:
            continue  # another worker opened it meanwhile: take that one
    raise RuntimeError(f"cannot open event {what.fingerprint}")


def _open_or_reopen(rule: RuleSpec, what: Occurrence, now: datetime) -> Event:
    events = Event.objects.select_for_update()
    event = events.filter(fingerprint=what.fingerprint, state__in=OPEN_EVENT_STATES).first()
    if event is None:
        event = _reopen_or_create(rule, what, now, events)
        live.publish_on_commit(event.pk, event.state, event.tenant_id)
        return event
    event.last_seen_at, event.labels = now, what.labels
    summary = what.summary_fields()
    for name, value in summary.items():
        setattr(event, name, value)
    event.save(update_fields=["last_seen_at", "labels", *summary])
    return event


def _reopen_or_create(rule: RuleSpec, what: Occurrence, now: datetime, events) -> Event:
    if rule.renotify_seconds:
        since = now - timedelta(seconds=rule.renotify_seconds)
        event = (
            events.filter(fingerprint=what.fingerprint, state=EventState.RESOLVED,
                          resolved_at__gte=since)
            .order_by("-resolved_at").first()
        )  # fmt: skip
        if event is not None:
            event.state, event.resolved_at, event.last_seen_at = EventState.FIRING, None, now
            event.labels = what.labels
            for name, value in what.summary_fields().items():
                setattr(event, name, value)
            event.acknowledged_at = event.acknowledged_by = None
            event.save()
            return event
    return Event.objects.create(
        rule_id=rule.id, rule_key=rule.key[:100], rule_name=rule.name[:200],
        severity=rule.severity, scope=what.scope[:255], fingerprint=what.fingerprint,
        labels=what.labels, tenant_id=what.tenant_id, started_at=now, last_seen_at=now,
        **what.summary_fields(),
    )  # fmt: skip


def open_with_state_keys() -> list[tuple[int, str]]:
    """(id, evaluation key) of each open event that a per-cycle rule keeps state for."""
    return list(
        Event.objects.filter(state__in=OPEN_EVENT_STATES)
        .exclude(state_key="")
        .values_list("pk", "state_key")
    )


def clear(event_id: int, *, now: datetime | None = None) -> bool:
    """The rule no longer holds: resolve the event and send that, if its firing was sent."""
    now = now or timezone.now()
    with transaction.atomic():
        event = Event.objects.select_for_update().filter(
            pk=event_id, state__in=OPEN_EVENT_STATES).first()  # fmt: skip
        if event is None:
            return False
        event.state, event.resolved_at, event.last_seen_at = EventState.RESOLVED, now, now
        event.save(update_fields=["state", "resolved_at", "last_seen_at"])
        live.publish_on_commit(event.pk, event.state, event.tenant_id)
        if event.routed_state == EventState.FIRING:
            recipients.route(event.pk, now=now)
    return True


def reconcile(
    rule: RuleSpec, wanted: Mapping[str, Occurrence], *, now: datetime | None = None
) -> tuple[int, int]:
    """For rules checked from the database (windows, business state): fire each wanted
    occurrence, resolve the rule's open events that are not wanted. (fired, cleared)."""
    now = now or timezone.now()
    open_events = dict(
        Event.objects.filter(rule_id=rule.id, state__in=OPEN_EVENT_STATES).values_list(
            "fingerprint", "pk"
        )
    )
    for what in wanted.values():
        fire(rule, what, now=now)
    gone = [pk for fp, pk in open_events.items() if fp not in wanted]
    for pk in gone:
        clear(pk, now=now)
    return len(wanted), len(gone)


def acknowledge(event_id: int, *, actor, address: str | None) -> bool:
    """Someone is on it: no more re-notifications until it resolves (audited)."""
    with transaction.atomic():
        event = Event.objects.select_for_update().get(pk=event_id)
        if event.state != EventState.FIRING:
            return False
        event.state, event.acknowledged_at = EventState.ACKNOWLEDGED, timezone.now()
        event.acknowledged_by = actor if getattr(actor, "is_authenticated", False) else None
        event.save(update_fields=["state", "acknowledged_at", "acknowledged_by"])
        live.publish_on_commit(event.pk, event.state, event.tenant_id)
        record("alerts.event.acknowledge", event, actor=actor, address=address,
               tenant_id=event.tenant_id, before={"state": EventState.FIRING},
               after={"state": EventState.ACKNOWLEDGED})  # fmt: skip
    return True


def resolve_by_hand(event_id: int, *, actor, address: str | None) -> bool:
    """Close an open event (audited). If its rule still holds, it reopens."""
    with transaction.atomic():
        state = Event.objects.filter(pk=event_id).values_list("state", flat=True).first()
        if state not in OPEN_EVENT_STATES or not clear(event_id):
            return False
        event = Event.objects.get(pk=event_id)
        record("alerts.event.resolve", event, actor=actor, address=address,
               tenant_id=event.tenant_id, before={"state": state},
               after={"state": EventState.RESOLVED})  # fmt: skip
    return True
