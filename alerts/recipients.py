"""Who gets an event: the subscriptions that match it, through their channels.

A subscription matches an event when its rules are empty or hold the event's rule, the
event is at least its lowest severity, and the event is in its scope. Tenant isolation
is decided here, at each send, from current memberships:

- a tenant's subscription gets that tenant's events only;
- a user's own subscription gets the events of the tenants the user is a member of, and
  platform events (no tenant: cards, nodes, Alertmanager) only when the user is a
  platform admin or a node operator (``agents.change_node``); a platform admin's gets
  every tenant's events too, as ``alerts.permissions.visible_events`` shows them.

Each channel gets one delivery per send however many subscriptions lead to it. Inside a
subscription's quiet hours a delivery waits for their end (the outbox's requeue sends
it then); critical events go at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, time, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.permissions import CHANGE_NODE
from alerts import outbox
from alerts.choices import SEVERITY_RANK, ScopeKind, Severity
from alerts.models import Event, Subscription
from quotas.interface import tenant_members
from quotas.permissions import holders_of, platform_admins


def quiet_until(start: time | None, end: time | None, now: datetime) -> datetime | None:
    """When the quiet hours that hold ``now`` end (in the portal's time zone), or None
    when ``now`` is outside them (or there are none)."""
    if start is None or end is None or start == end:
        return None
    local = timezone.localtime(now)
    t = local.time()
    inside = start <= t < end if start < end else (t >= start or t < end)
    if not inside:
        return None
    moment = local.replace(hour=end.hour, minute=end.minute, second=0, microsecond=0)
    if moment <= local:
        moment += timedelta(days=1)
    return moment


def _levels_at_or_below(severity: str) -> list[str]:
    rank = SEVERITY_RANK.get(severity, 0)
    return [level for level, r in SEVERITY_RANK.items() if r <= rank]


def scope_matches(sub: Subscription, event: Event) -> bool:
    kind, name = sub.scope_kind, sub.scope_name
    if kind == ScopeKind.ALL or not name:
        return True
    labels = event.labels or {}
    if kind == ScopeKind.TENANT:
        return labels.get("tenant") == name
    return str(labels.get(kind, "")) == name


def _allowed(user_ids: Iterable[int], rule: Q) -> set[int]:
    """Which of these users ``rule`` holds for, in one query whatever their number."""
    users = get_user_model().objects.filter(pk__in=list(user_ids), is_active=True)
    return set(users.filter(rule).values_list("pk", flat=True))


def matching(event: Event) -> list[Subscription]:
    """The subscriptions that get this event, tenant isolation applied."""
    candidates = (
        Subscription.objects.filter(enabled=True, channel__enabled=True)
        .filter(min_severity__in=_levels_at_or_below(event.severity))
        .filter(Q(rules=None) | Q(rules=event.rule_id) if event.rule_id else Q(rules=None))
        .filter(Q(owner__isnull=False) | Q(tenant_id=event.tenant_id))
        .select_related("channel")
        .distinct()
    )
    subs = [s for s in candidates if scope_matches(s, event)]
    owners = {s.owner_id for s in subs if s.owner_id}
    if not owners:
        allowed: set[int] = set()
    elif event.tenant_id is None:
        allowed = _allowed(owners, platform_admins() | holders_of(CHANGE_NODE))
    else:
        allowed = _allowed(owners, platform_admins() | tenant_members(event.tenant_id))
    return [s for s in subs if s.tenant_id is not None or s.owner_id in allowed]


def _enqueue(subs: Iterable[Subscription], now: datetime, critical: bool, **what: Any) -> list[int]:
    # One delivery per channel: the earliest any of its subscriptions allows.
    due: dict[int, datetime | None] = {}
    for sub in subs:
        held = None if critical else quiet_until(sub.quiet_start, sub.quiet_end, now)
        if sub.channel_id not in due:
            due[sub.channel_id] = held
        elif due[sub.channel_id] is not None:
            due[sub.channel_id] = None if held is None else min(held, due[sub.channel_id])
    return [outbox.enqueue(channel_id, not_before=held, **what) for channel_id, held in due.items()]


def route(event_id: int, *, now: datetime | None = None) -> list[int]:
    """Send the event, as it now stands, to everyone subscribed; the deliveries' ids."""
    now = now or timezone.now()
    with transaction.atomic():
        event = Event.objects.select_for_update().get(pk=event_id)
        ids = _enqueue(matching(event), now, event.severity == Severity.CRITICAL,
                       event_id=event.pk)  # fmt: skip
        Event.objects.filter(pk=event.pk).update(routed_at=now, routed_state=event.state)
    return ids


def route_notice(
    user_ids: Iterable[int], notice: dict[str, Any], severity: str, rule_id: int | None,
    *, now: datetime | None = None,
) -> list[int]:  # fmt: skip
    """A GPU request notice to each user's own subscribed channels (never a tenant's:
    quotas chose the people concerned)."""
    now = now or timezone.now()
    user_ids = list(user_ids)
    if not user_ids:
        return []
    subs = (
        Subscription.objects.filter(enabled=True, channel__enabled=True, owner_id__in=user_ids)
        .filter(min_severity__in=_levels_at_or_below(severity))
        .filter(Q(rules=None) | Q(rules=rule_id) if rule_id else Q(rules=None))
        .select_related("channel")
        .distinct()
    )  # fmt: skip
    subs = list(subs)
    if not subs:  # most steps of most requests: nobody subscribed, no transaction
        return []
    with transaction.atomic():
        return _enqueue(subs, now, severity == Severity.CRITICAL, event_id=None,
                        notice=notice)  # fmt: skip
