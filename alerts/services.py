"""Channels: create, change, delete (audited), test; and the helpers the rules share
(fingerprints, the rules' version). Events fire through ``alerts.events``.

Plain values in and out; every change runs in one transaction with its audit entry.
Settings are checked by the channel kind's transport; a bad value raises
``django.core.exceptions.ValidationError`` with the field named, and nothing changes.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from alerts import outbox
from alerts.choices import ChannelKind
from alerts.models import Channel
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
    redis_client.client().set(rules_version_key(), uuid.uuid4().hex)


def rules_version() -> bytes:
    """The rules' current version: a token never written before, so a process's copy
    matches only the state it was read in. A counter would repeat after Redis loses it
    (a restart without persistence, a flush), and an absent key would match a copy read
    while it was absent; an absent key gets a fresh token instead, which no copy holds."""
    client, key = redis_client.client(), rules_version_key()
    fresh = uuid.uuid4().hex.encode()
    if client.set(key, fresh, nx=True):
        return fresh
    # Another process wrote one first; gone again already is a fresh token's case too.
    return client.get(key) or fresh


def fingerprint_of(rule_key: str, scope: str, labels: Mapping[str, Any]) -> str:
    text = json.dumps([rule_key, scope, sorted((str(k), str(v)) for k, v in labels.items())])
    return hashlib.sha256(text.encode()).hexdigest()
