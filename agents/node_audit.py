"""Node changes into the audit log, in the transaction that makes them.

A node's state as a person sets it: its name, address, labels, state and the token's hint,
never the token (its encrypted form is left out by ``audit.interface.snapshot`` too). What
the poller writes (last seen, versions, missed polls, online and offline) is the system's
reading, not a change anyone made, and is not recorded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpRequest

from agents.models import Node
from audit import interface as audit

FIELDS = ("name", "hostname", "source", "agent_url", "agent_token_hint", "labels", "state")
CREATED, UPDATED, DELETED = (
    audit.AuditAction.NODE_CREATED, audit.AuditAction.NODE_UPDATED, audit.AuditAction.NODE_DELETED,
)  # fmt: skip


def state(node: Node) -> dict[str, Any]:
    return audit.snapshot(node, FIELDS)


def who(request: HttpRequest | None) -> dict[str, Any]:
    """The actor and address keywords for the registration functions, from a request."""
    if request is None:
        return {"actor": None, "address": None}
    return {"actor": request.user, "address": audit.request_address(request)}


def _entry(action: str, node: Node, before, after, actor, address, message: str):
    return audit.entry(
        action, node, actor=actor, address=address, before=before, after=after, message=message
    )


def created(node: Node, *, actor=None, address: str | None = None, message: str = "") -> None:
    audit.record_all([_entry(CREATED, node, None, state(node), actor, address, message)])


def updated(
    node: Node,
    before: dict[str, Any],
    *,
    actor=None,
    address: str | None = None,
    token_replaced: bool = False,
    message: str = "",
) -> None:
    """Recorded when something changed: a field, or the token (whose hint may stay)."""
    after = state(node)
    if after == before and not token_replaced:
        return
    if token_replaced:
        message = "; ".join(part for part in (message, "agent token replaced") if part)
    audit.record_all([_entry(UPDATED, node, before, after, actor, address, message)])


def deleted(nodes: Iterable[Node], *, actor=None, address: str | None = None) -> None:
    audit.record_all(_entry(DELETED, node, state(node), None, actor, address, "") for node in nodes)


def imported(
    new: Iterable[Node],
    changed: Iterable[tuple[Node, dict[str, Any], bool]],
    *,
    actor=None,
    address: str | None = None,
) -> None:
    """An import: one entry per node it added or changed, written together."""
    entries = [_entry(CREATED, node, None, state(node), actor, address, "import") for node in new]
    for node, before, token_replaced in changed:
        message = "import; agent token replaced" if token_replaced else "import"
        entries.append(_entry(UPDATED, node, before, state(node), actor, address, message))
    audit.record_all(entries)
