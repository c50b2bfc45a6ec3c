"""The audit log's public interface: ``record`` one change. Every app calls it in the
same transaction as the change it records, so a change rolled back leaves no entry and
a change committed always has one."""

from __future__ import annotations

import contextvars
import ipaddress
import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.http import HttpRequest

from audit.choices import AuditAction
from audit.models import AuditEntry

__all__ = [
    "AuditAction", "AuditEntry", "action_label", "entry", "history_of", "name_actions",
    "record", "record_all", "recorded_together", "request_address", "snapshot",
]  # fmt: skip


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


def request_address(request: HttpRequest | None) -> str | None:
    """The caller's address as the login lockout counts it (``portal.security.client_ip``:
    the TCP peer, or behind a trusted TLS proxy the address it forwarded)."""
    if request is None:
        return None
    from portal.security import client_ip  # the project's one rule for the client address

    return _address(client_ip(request))


def _address(value: str | None) -> str | None:
    # The column is PostgreSQL's inet: anything else (a unix socket's "", a test client's
    # host name) would fail the whole transaction, so it is stored as no address.
    try:
        return str(ipaddress.ip_address((value or "").strip()))
    except ValueError:
        return None


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder)) if value is not None else None


def entry(
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
    """One entry, not yet saved: for ``record_all``."""
    if target is not None:
        target_type = target_type or target._meta.label_lower
        target_id = target_id or str(target.pk)
        target_repr = target_repr or str(target)
    authenticated = actor is not None and getattr(actor, "is_authenticated", False)
    return AuditEntry(
        action=action[:64],
        actor=actor if authenticated else None,
        actor_name=(actor.get_username() if authenticated else "") or "",
        address=_address(address),
        target_type=target_type[:64],
        target_id=str(target_id)[:64],
        target_repr=str(target_repr)[:255],
        tenant_id=tenant_id,
        before=_json(before),
        after=_json(after),
        message=message,
    )


_held: contextvars.ContextVar[list[AuditEntry] | None] = contextvars.ContextVar(
    "audit_held", default=None
)


def record(action: str, target: models.Model | None = None, **kwargs: Any) -> AuditEntry:
    """Append one entry. ``actor`` is a user or None (the system: a task, the poller).
    Inside ``recorded_together`` it is written when the block ends (no id until then).

    Keywords as ``entry``: actor, address, tenant_id, before, after, message, target_type,
    target_id, target_repr.
    """
    new = entry(action, target, **kwargs)
    if (held := _held.get()) is not None:
        held.append(new)
    else:
        new.save()
    return new


@contextmanager
def recorded_together() -> Iterator[None]:
    """Inside one transaction: the entries recorded in the block are written in one INSERT,
    in order, when it ends without an error (a create that is approved and placed at once
    records three). An error leaves them unwritten, as its transaction's rollback would.
    Nested blocks join the outer one."""
    if _held.get() is not None:
        yield
        return
    held: list[AuditEntry] = []
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
    if held:
        AuditEntry.objects.bulk_create(held)


def record_all(entries: Iterable[AuditEntry]) -> list[AuditEntry]:
    """Append many entries made with ``entry`` at once (an import of thousands of nodes)."""
    return AuditEntry.objects.bulk_create(list(entries), batch_size=1000)


# What a person reads for each action: apps name their own (``name_actions``, from their
# AppConfig.ready); an action nobody named shows as its code.
_ACTION_LABELS: dict[str, Any] = dict(AuditAction.choices)


def name_actions(labels: Mapping[str, Any]) -> None:
    """Register an app's audit actions with their (lazily translated) labels."""
    _ACTION_LABELS.update(labels)


def action_label(action: str) -> str:
    """The action as the reader's language says it, or its code when unnamed."""
    label = _ACTION_LABELS.get(action)
    return str(label) if label is not None else action


def history_of(target: models.Model) -> models.QuerySet[AuditEntry]:
    """The entries about one object, oldest first (a request's page shows its history)."""
    return AuditEntry.objects.filter(
        target_type=target._meta.label_lower, target_id=str(target.pk)
    ).order_by("at", "id")
