"""Node registration: add and edit agent nodes, import many at once.

Plain values in, plain values (or the saved Node) out; every rule lives here so the
pages, the API and the import apply the same ones. Errors are collected per field (Django's
``ValidationError.message_dict``) so a form or a 400 answer can show all of them at once.
Each change is recorded in the audit log (``agents.node_audit``) in its own transaction,
with the ``actor`` and source ``address`` the caller passes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from agents import networks, node_audit
from agents.choices import NodeSource, NodeState
from agents.models import Node, lock_inventory, token_hint
from agents.validators import clean_token, parse_labels, valid_agent_url
from portal import crypto

FIELDS = ("name", "agent_url", "token", "labels", "state")
MAX_IMPORT_ROWS = 5000
_NAME = re.compile(r"^[\w.:-]{1,255}$")

Errors = dict[str, list[str]]


# --- validation -----------------------------------------------------------------------


def clean_node_values(values: Mapping[str, Any], *, partial: bool) -> tuple[dict[str, Any], Errors]:
    """Normalise and check one node's fields; absent fields are skipped when ``partial``."""
    cleaned: dict[str, Any] = {}
    errors: Errors = {}

    def check(name: str, convert) -> None:
        if name not in values or (partial and values[name] is None):
            return
        raw = values[name]
        if name != "labels" and raw is not None and not isinstance(raw, str):
            # Before str(): a YAML cell may be a list standing for millions of values.
            errors.setdefault(name, []).append(_("Enter text, not a list or a mapping."))
            return
        try:
            cleaned[name] = convert(raw)
        except (ValueError, ValidationError) as exc:
            messages = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
            errors.setdefault(name, []).extend(messages)

    def name(raw: Any) -> str:
        text = str(raw or "").strip()
        if not _NAME.match(text):
            raise ValueError(_("Use 1 to 255 letters, digits, dots, colons, dashes or _."))
        return text

    def url(raw: Any) -> str:
        text = str(raw or "").strip().rstrip("/")
        if not valid_agent_url(text):
            raise ValueError(_("Enter an http:// or https:// URL."))
        if (refused := networks.url_refusal(text)) is not None:
            raise ValueError(refused)
        return text

    def token(raw: Any) -> str:
        return clean_token(str(raw or ""))

    def state(raw: Any) -> str:
        text = str(raw or NodeState.OFFLINE).strip().lower()
        if text not in NodeState.values:
            raise ValueError(
                _("Choose one of: %(states)s.") % {"states": ", ".join(NodeState.values)}
            )
        return text

    if not partial:
        values = {"name": "", "agent_url": "", "token": "", "labels": {}, "state": ""} | {
            k: v for k, v in values.items() if v is not None
        }
    check("name", name)
    check("agent_url", url)
    check("token", token)
    check("labels", parse_labels)
    check("state", state)
    return cleaned, errors


def _taken(cleaned: Mapping[str, Any], exclude_pk: int | None) -> Errors:
    errors: Errors = {}
    others = Node.objects.exclude(pk=exclude_pk) if exclude_pk else Node.objects.all()
    if "name" in cleaned and others.filter(name=cleaned["name"]).exists():
        errors["name"] = [_("A node with this name already exists.")]
    if cleaned.get("agent_url") and others.filter(agent_url=cleaned["agent_url"]).exists():
        errors["agent_url"] = [_("Another node already uses this agent URL.")]
    return errors


def _move_errors(node: Node, cleaned: Mapping[str, Any]) -> Errors:
    """A new URL takes the token again: a stored token is only ever sent to the URL it was
    entered for, so whoever may edit a node cannot send its token somewhere else."""
    url = cleaned.get("agent_url")
    if not url or url == node.agent_url or not node.agent_token_encrypted or cleaned.get("token"):
        return {}
    return {"token": [move_needs_token()]}


def move_needs_token() -> str:
    return _(
        "Enter the agent token again to change the agent URL: the stored token is only "
        "sent to the URL it was entered for."
    )


def check_fields(values: Mapping[str, Any], node_pk: int | None) -> tuple[dict[str, Any], Errors]:
    """Normalise and check the given fields (``None``: not given) for a new or existing node."""
    cleaned, errors = clean_node_values(values, partial=True)
    problems = [_taken(cleaned, node_pk)]
    if node_pk and (node := Node.objects.filter(pk=node_pk).first()) is not None:
        problems.append(_move_errors(node, cleaned))
    for found in problems:
        for key, messages in found.items():
            errors.setdefault(key, []).extend(messages)
    return cleaned, errors


# --- one node ---------------------------------------------------------------------------


@transaction.atomic
def register_node(
    *,
    name: str,
    agent_url: str,
    token: str = "",
    labels: Mapping[str, Any] | str | None = None,
    state: str = NodeState.OFFLINE,
    actor=None,
    address: str | None = None,
) -> Node:
    values = {"name": name, "agent_url": agent_url, "token": token, "labels": labels}
    cleaned, errors = clean_node_values(values | {"state": state}, partial=False)
    for key, messages in _taken(cleaned, None).items():
        errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    node = Node(source=NodeSource.AGENT, **_model_fields(cleaned))
    node.set_agent_token(cleaned["token"])
    node.save()
    node_audit.created(node, actor=actor, address=address)
    return node


@transaction.atomic
def update_node(
    node_id: int,
    *,
    name: str | None = None,
    agent_url: str | None = None,
    token: str | None = None,
    labels: Mapping[str, Any] | str | None = None,
    state: str | None = None,
    actor=None,
    address: str | None = None,
) -> Node:
    """Change the given fields; ``None`` keeps a field, and so does an empty token."""
    node = Node.objects.select_for_update().get(pk=node_id)
    before = node_audit.state(node)
    if node.source != NodeSource.AGENT:
        raise ValidationError({"name": [_("Nodes read through Prometheus are read-only.")]})
    values = {"name": name, "agent_url": agent_url, "labels": labels, "state": state}
    cleaned, errors = clean_node_values(values | {"token": token or None}, partial=True)
    for key, messages in (_taken(cleaned, node.pk) | _move_errors(node, cleaned)).items():
        errors.setdefault(key, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    changed = _apply_changes(node, cleaned)
    node.save()
    token_replaced = "agent_token_encrypted" in changed
    node_audit.updated(node, before, actor=actor, address=address, token_replaced=token_replaced)
    return node


@transaction.atomic
def delete_node(node_id: int, *, actor=None, address: str | None = None) -> bool:
    """Delete one node (its cards and their history go with it), recorded with its state;
    False when it was gone already."""
    # The inventory lock first, as Node.delete() takes it: a row lock taken before it could
    # deadlock with a poll cycle that holds it and waits for this node's row.
    lock_inventory(exclusive=True)
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return False
    node_audit.deleted([node], actor=actor, address=address)
    node.delete()
    return True


def _model_fields(cleaned: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in cleaned.items() if k != "token"}


def _apply_changes(node: Node, cleaned: Mapping[str, Any]) -> list[str]:
    """Set the cleaned values that differ from the node's; returns the model fields changed.

    An empty token keeps the stored one. A new address or token ends an offline node's
    back-off, so it is tried at the next cycle; a label or state change does not.
    """
    changed = [k for k, v in _model_fields(cleaned).items() if getattr(node, k) != v]
    for key in changed:
        setattr(node, key, cleaned[key])
    token = cleaned.get("token")
    if token and _token_differs(node, token):
        node.set_agent_token(token)
        changed += ["agent_token_encrypted", "agent_token_hint"]
    if {"agent_url", "agent_token_hint"} & set(changed) and node.poll_after is not None:
        node.poll_after = None
        changed.append("poll_after")
    return changed


def _token_differs(node: Node, token: str) -> bool:
    if node.agent_token_hint != token_hint(token):
        return True  # no decryption needed
    try:
        return node.agent_token != token
    except crypto.DecryptionError:
        return True  # a token no key opens is replaced by the one entered


# --- many nodes -------------------------------------------------------------------------


@dataclass(frozen=True)
class RowError:
    row: int
    field: str
    message: str


@dataclass
class ImportReport:
    """What an import wrote, or (``dry_run``) would write; the lists hold node names.

    On any error every list stays empty: nothing was written.
    """

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # rows that match their node already
    errors: list[RowError] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors


def import_nodes(
    rows: Iterable[Mapping[str, Any]],
    *,
    dry_run: bool = False,
    update: bool = False,
    actor=None,
    address: str | None = None,
) -> ImportReport:
    """All or nothing: any invalid row and nothing is written. Rows are numbered from 1.

    A row naming a registered node is an error, unless ``update``: then it changes that
    node (``_update_values`` says which cells count). Agent URLs stay unique: a row may
    keep its own node's URL but not take one another registered node has, even if that
    node's row moves it elsewhere in the same file.
    """
    rows = list(rows)
    report = ImportReport(dry_run=dry_run)
    if not rows:
        report.errors.append(RowError(0, "", _("The file holds no nodes.")))
        return report
    if len(rows) > MAX_IMPORT_ROWS:
        message = _("At most %(count)s nodes per import.") % {"count": MAX_IMPORT_ROWS}
        report.errors.append(RowError(0, "", message))
        return report
    with transaction.atomic():
        # One query for every existing name and URL, not two per row.
        names: set[str] = set()
        url_owners: dict[str, str] = {}
        for name, url in Node.objects.values_list("name", "agent_url"):
            names.add(name)
            if url:
                url_owners[url] = name
        targets = _update_targets(rows, names, lock=not dry_run) if update else {}
        seen_names: dict[str, int] = {}
        seen_urls: dict[str, int] = {}
        new_nodes: list[Node] = []
        changes: dict[str, tuple[Node, list[str]]] = {}
        befores: dict[str, dict[str, Any]] = {}  # each updated node as it was, for the log
        for number, row in enumerate(rows, start=1):
            unknown = sorted(set(row) - set(FIELDS) - {"row"})
            if unknown:
                message = _("Unknown columns: %(names)s.") % {"names": ", ".join(unknown)}
                report.errors.append(RowError(number, "", message))
                continue
            node = targets.get(_name_key(row))
            if node is None:
                cleaned, errors = clean_node_values(row, partial=False)
            else:
                cleaned, errors = clean_node_values(_update_values(row), partial=True)
                for key, messages in _move_errors(node, cleaned).items():
                    errors.setdefault(key, []).extend(messages)
                if node.source != NodeSource.AGENT:
                    message = _("Nodes read through Prometheus are read-only.")
                    errors.setdefault("name", []).append(message)
            name, url = cleaned.get("name"), cleaned.get("agent_url")
            if node is None and name in names:
                errors.setdefault("name", []).append(_("A node with this name already exists."))
            elif name in seen_names:
                message = _("Same name as row %(row)s.") % {"row": seen_names[name]}
                errors.setdefault("name", []).append(message)
            if url in url_owners and (node is None or url_owners[url] != name):
                message = _("Another node already uses this agent URL.")
                errors.setdefault("agent_url", []).append(message)
            elif url in seen_urls:
                message = _("Same agent URL as row %(row)s.") % {"row": seen_urls[url]}
                errors.setdefault("agent_url", []).append(message)
            for key, messages in errors.items():
                report.errors.extend(RowError(number, key, m) for m in messages)
            if errors:
                continue
            seen_names.setdefault(name, number)
            if url:
                seen_urls.setdefault(url, number)
            if node is None:
                node = Node(source=NodeSource.AGENT, **_model_fields(cleaned))
                node.set_agent_token(cleaned["token"])
                new_nodes.append(node)
            else:
                befores[name] = node_audit.state(node)
                changes[name] = (node, _apply_changes(node, cleaned))
        if report.errors:
            return report
        report.created = [node.name for node in new_nodes]
        report.updated = [name for name, (_node, fields) in changes.items() if fields]
        report.unchanged = [name for name, (_node, fields) in changes.items() if not fields]
        if dry_run:
            return report
        Node.objects.bulk_create(new_nodes)
        _save_changes([change for change in changes.values() if change[1]])
        changed = [
            (node, befores[name], "agent_token_encrypted" in fields)
            for name, (node, fields) in changes.items()
            if fields
        ]
        node_audit.imported(new_nodes, changed, actor=actor, address=address)
    return report


def _name_key(row: Mapping[str, Any]) -> str:
    name = row.get("name")
    return name.strip() if isinstance(name, str) else ""  # as clean_node_values reads it


def _update_targets(
    rows: list[Mapping[str, Any]], names: set[str], *, lock: bool
) -> dict[str, Node]:
    """The registered nodes the rows name, locked against concurrent edits when writing."""
    wanted = {_name_key(row) for row in rows} & names
    query = Node.objects.filter(name__in=wanted)
    return {node.name: node for node in (query.select_for_update() if lock else query)}


def _update_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """The cells that change an existing node. An absent or empty URL, token or state keeps
    the stored value; a labels cell, once its column is there, replaces the labels (empty:
    none)."""
    values = {
        key: value
        for key, value in row.items()
        if key in FIELDS
        and key != "labels"
        and value is not None
        and (not isinstance(value, str) or value.strip())  # others: clean_node_values refuses
    }
    if "labels" in row:
        values["labels"] = "" if row["labels"] is None else row["labels"]
    return values


def _save_changes(changes: list[tuple[Node, list[str]]]) -> None:
    """One UPDATE per changed node, of only the fields it changed. (bulk_update took three
    times the CPU for 5,000 nodes: it builds and resolves a CASE expression per value.)"""
    now = timezone.now()  # update() leaves auto_now fields alone
    for node, changed in changes:
        values = {name: getattr(node, name) for name in changed}
        Node.objects.filter(pk=node.pk).update(updated=now, **values)


def reencrypt_tokens() -> int:
    """Re-encrypt every stored token under the newest key; returns how many were rewritten."""
    count = 0
    with transaction.atomic():
        for pk, value in Node.objects.exclude(agent_token_encrypted="").values_list(
            "pk", "agent_token_encrypted"
        ):
            Node.objects.filter(pk=pk).update(agent_token_encrypted=crypto.reencrypt(value))
            count += 1
    return count
