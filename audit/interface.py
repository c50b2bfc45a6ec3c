"""The audit log's public interface: ``record`` one change. Every app calls it in the
same transaction as the change it records, so a change rolled back leaves no entry and
a change committed always has one."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from audit.models import AuditEntry

__all__ = ["AuditEntry", "history_of", "record", "snapshot"]


def snapshot(obj: models.Model, fields: tuple[str, ...] | None = None) -> dict[str, Any]:
    """A model's concrete field values as JSON-ready data, for ``before`` and ``after``."""
    out = {}
    for field in obj._meta.concrete_fields:
        if fields is not None and field.name not in fields:
            continue
        if "password" in field.name or "encrypted" in field.name:
            continue  # secrets never enter the log
        out[field.attname] = field.value_from_object(obj)
    return json.loads(json.dumps(out, cls=DjangoJSONEncoder))


def record(
    action: str,
    target: models.Model | None = None,
    *,
    actor=None,
    address: str | None = None,
    tenant_id: int | None = None,
    before: dict | None = None,
    after: dict | None = None,
    message: str = "",
    target_type: str = "",
    target_id: str = "",
    target_repr: str = "",
) -> AuditEntry:
    """Append one entry. ``actor`` is a user or None (the system: a task, the poller)."""
    if target is not None:
        target_type = target_type or target._meta.label_lower
        target_id = target_id or str(target.pk)
        target_repr = target_repr or str(target)
    authenticated = actor is not None and getattr(actor, "is_authenticated", False)
    return AuditEntry.objects.create(
        action=action,
        actor=actor if authenticated else None,
        actor_name=(actor.get_username() if authenticated else "") or "",
        address=address or None,
        target_type=target_type[:64],
        target_id=str(target_id)[:64],
        target_repr=str(target_repr)[:255],
        tenant_id=tenant_id,
        before=json.loads(json.dumps(before, cls=DjangoJSONEncoder))
        if before is not None
        else None,
        after=json.loads(json.dumps(after, cls=DjangoJSONEncoder)) if after is not None else None,
        message=message,
    )


def history_of(target: models.Model) -> models.QuerySet[AuditEntry]:
    """The entries about one object, oldest first (a request's page shows its history)."""
    return AuditEntry.objects.filter(
        target_type=target._meta.label_lower, target_id=str(target.pk)
    ).order_by("at", "id")
