"""Channels and events: create, change, delete (audited), and what fires.

Plain values in and out; every change runs in one transaction with its audit entry.
Settings are checked by the channel kind's transport; a bad value raises
``django.core.exceptions.ValidationError`` with the field named, and nothing changes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from alerts import outbox
from alerts.choices import OPEN_EVENT_STATES, ChannelKind, EventState, Severity
from alerts.models import Channel, Event
from alerts.transports import TRANSPORTS
from audit.interface import record, snapshot
from portal import redis_client

NAME_MAX_CHARS = 100
AUDITED = ("name", "kind", "owner", "tenant", "enabled", "disabled_reason", "language",
           "settings", "secret_hint")  # fmt: skip


def _check_common(name: Any, kind: Any, language: Any, values: Any) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not name.strip():
        errors["name"] = [_("This field is required.")]
    elif len(name.strip()) > NAME_MAX_CHARS:
        errors["name"] = [_("At most %(n)s characters.") % {"n": NAME_MAX_CHARS}]
    if kind not in ChannelKind.values:
        errors["kind"] = [_("Choose one of the channel kinds.")]
    if language not in {"", *dict(settings.LANGUAGES)}:
        errors["language"] = [_("Choose one of the languages.")]
    if not isinstance(values, Mapping):
        errors["settings"] = [_("Settings must be an object.")]
    return errors


def _apply_settings(channel: Channel, values: Mapping[str, Any], keep_secrets: bool) -> None:
    transport = TRANSPORTS[channel.kind]
    current = channel.secrets if keep_secrets else {}
    plain, secrets = transport.clean(values, current)
    channel.settings = plain
    channel.set_secrets(secrets)
    channel.secret_hint = transport.hint(plain, secrets)


def create_channel(
    *, actor, address: str | None, name: str, kind: str, settings_values: Mapping[str, Any],
    owner_id: int | None = None, tenant_id: int | None = None, enabled: bool = True,
    language: str = "",
) -> int:  # fmt: skip
    """A new channel for ``owner_id`` (a user) or ``tenant_id``; its id."""
    errors = _check_common(name, kind, language, settings_values)
    if (owner_id is None) == (tenant_id is None):
        errors.setdefault("tenant", []).append(_("A channel belongs to a user or a tenant."))
    if errors:
        raise ValidationError(errors)
    channel = Channel(
        name=name.strip(), kind=kind, owner_id=owner_id, tenant_id=tenant_id,
        enabled=bool(enabled), language=language,
    )  # fmt: skip
    _apply_settings(channel, settings_values, keep_secrets=False)
    with transaction.atomic():
        channel.save()
        record("alerts.channel.create", channel, actor=actor, address=address,
               tenant_id=tenant_id, after=snapshot(channel, AUDITED))  # fmt: skip
    return channel.pk


def update_channel(
    channel_id: int, *, actor, address: str | None, changes: Mapping[str, Any]
) -> None:
    """Change ``name``, ``kind``, ``enabled``, ``language`` and ``settings``. Secrets left
    out keep their values, unless the kind changes: a new kind needs its settings anew.
    Enabling a channel the portal had disabled clears the reason."""
    with transaction.atomic():
        channel = Channel.objects.select_for_update().get(pk=channel_id)
        before = snapshot(channel, AUDITED)
        name = changes.get("name", channel.name)
        kind = changes.get("kind", channel.kind)
        language = changes.get("language", channel.language)
        kind_changed = kind != channel.kind
        values = changes.get("settings")
        if values is None:
            values = {} if kind_changed else dict(channel.settings)
        errors = _check_common(name, kind, language, values)
        if errors:
            raise ValidationError(errors)
        channel.name, channel.kind, channel.language = name.strip(), kind, language
        if "settings" in changes or kind_changed:
            merged = values if kind_changed else {**channel.settings, **values}
            _apply_settings(channel, merged, keep_secrets=not kind_changed)
        if "enabled" in changes:
            channel.enabled = bool(changes["enabled"])
            if channel.enabled:
                channel.disabled_reason = ""
        channel.save()
        record("alerts.channel.update", channel, actor=actor, address=address,
               tenant_id=channel.tenant_id, before=before,
               after=snapshot(channel, AUDITED))  # fmt: skip


def delete_channel(channel_id: int, *, actor, address: str | None) -> None:
    with transaction.atomic():
        channel = Channel.objects.select_for_update().get(pk=channel_id)
        record("alerts.channel.delete", channel, actor=actor, address=address,
               tenant_id=channel.tenant_id, before=snapshot(channel, AUDITED))  # fmt: skip
        channel.delete()


def send_test(channel_id: int, *, actor, address: str | None) -> int:
    """Queue a test message to the channel, as alerts go (the outbox); the delivery's id.
    A disabled channel is enabled for it: testing is how a fixed channel is checked."""
    with transaction.atomic():
        channel = Channel.objects.select_for_update().get(pk=channel_id)
        if not channel.enabled:
            before = snapshot(channel, AUDITED)
            channel.enabled, channel.disabled_reason = True, ""
            channel.save(update_fields=["enabled", "disabled_reason", "updated"])
            record("alerts.channel.update", channel, actor=actor, address=address,
                   tenant_id=channel.tenant_id, before=before,
                   after=snapshot(channel, AUDITED))  # fmt: skip
        delivery_id = outbox.enqueue(channel.pk, event_id=None)
        record("alerts.channel.test", channel, actor=actor, address=address,
               tenant_id=channel.tenant_id, message=f"delivery {delivery_id}")  # fmt: skip
    return delivery_id


# --- events ------------------------------------------------------------------------------


def rules_version_key() -> str:
    return redis_client.key("alerts", "rules-version")


def bump_rules_version() -> None:
    """Every process reloads its rules at its next cycle (called when a rule changes)."""
    redis_client.client().incr(rules_version_key())


def fingerprint_of(rule_key: str, scope: str, labels: Mapping[str, Any]) -> str:
    text = json.dumps([rule_key, scope, sorted((str(k), str(v)) for k, v in labels.items())])
    return hashlib.sha256(text.encode()).hexdigest()


def raise_event(
    *, rule_key: str, rule_name: str, severity: str = Severity.WARNING, scope: str = "",
    labels: Mapping[str, Any] | None = None, summary: str = "", tenant_id: int | None = None,
    fingerprint: str = "", rule_id: int | None = None,
) -> tuple[int, bool]:  # fmt: skip
    """Fire: a new event, or the open one with the same fingerprint seen again (its
    summary refreshed). (event id, whether it is new)."""
    labels = dict(labels or {})
    fingerprint = fingerprint or fingerprint_of(rule_key, scope, labels)
    now = timezone.now()
    for _attempt in range(3):
        updated = Event.objects.filter(fingerprint=fingerprint, state__in=OPEN_EVENT_STATES).update(
            last_seen_at=now, summary=summary[:2000]
        )
        if updated:
            event_id = Event.objects.get(fingerprint=fingerprint, state__in=OPEN_EVENT_STATES).pk
            return event_id, False
        try:
            with transaction.atomic():
                event = Event.objects.create(
                    rule_id=rule_id, rule_key=rule_key[:100], rule_name=rule_name[:200],
                    severity=severity,
                    scope=scope[:255], fingerprint=fingerprint, labels=labels,
                    summary=summary[:2000], tenant_id=tenant_id, started_at=now,
                    last_seen_at=now,
                )  # fmt: skip
            return event.pk, True
        except IntegrityError:
            continue  # another process opened it meanwhile: update that one
    raise RuntimeError(f"cannot raise event {fingerprint}")


def resolve_event(event_id: int) -> bool:
    now = timezone.now()
    return bool(
        Event.objects.filter(pk=event_id, state__in=OPEN_EVENT_STATES).update(
            state=EventState.RESOLVED, resolved_at=now, last_seen_at=now
        )
    )


def notify(event_id: int, channel_ids: list[int]) -> list[int]:
    """One delivery of the event to each enabled channel; their ids. (Events raised by
    rules reach their subscribers through ``alerts.events`` and ``alerts.routing``.)"""
    with transaction.atomic():
        enabled = Channel.objects.filter(pk__in=channel_ids, enabled=True).values_list(
            "pk", flat=True
        )
        return [outbox.enqueue(channel_id, event_id=event_id) for channel_id in enabled]
