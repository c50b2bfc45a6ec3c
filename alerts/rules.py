"""The rules every source of events shares: each enabled rule as a ``RuleSpec``, the
rules' version in Redis (bumped when one changes, so each process reloads its copy), and
an occurrence's fingerprint. Below the sources (``alerts.sources``: the metrics cycle,
business states, reclaim, Alertmanager) and beside ``alerts.events``; imports none of them."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import transaction

from alerts.choices import ScopeKind
from alerts.evaluate import RuleSpec
from alerts.models import Rule
from portal import redis_client


def rules_version_key() -> str:
    return redis_client.key("alerts", "rules-version")


def bump_rules_version() -> None:
    """Every process reloads its rules at its next cycle (called when a rule changes)."""
    redis_client.client().set(rules_version_key(), uuid.uuid4().hex)


def on_rule_deleted(sender, *, using: str = "default", **kwargs) -> None:
    """``post_delete`` of a rule, however it goes: through ``alerts.config`` or by cascade
    with the pool, node or tenant it is scoped to, which no alerts code sees."""
    transaction.on_commit(bump_rules_version, using=using)


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


def spec_of(rule: Rule) -> RuleSpec:
    scope_id = {ScopeKind.POOL: rule.pool_id, ScopeKind.NODE: rule.node_id,
                ScopeKind.TENANT: rule.tenant_id}.get(rule.scope_kind)  # fmt: skip
    return RuleSpec(
        id=rule.pk, key=rule.key, name=rule.name, condition=rule.condition,
        comparison=rule.comparison, threshold=rule.threshold, for_seconds=rule.for_seconds,
        severity=rule.severity, renotify_seconds=rule.renotify_seconds,
        scope_kind=rule.scope_kind, scope_id=scope_id,
    )  # fmt: skip


_rules: tuple[bytes, list[RuleSpec]] | None = None


def enabled_rules() -> list[RuleSpec]:
    global _rules
    version = rules_version()
    if _rules is None or _rules[0] != version:
        _rules = (version, [spec_of(r) for r in Rule.objects.filter(enabled=True)])
    return _rules[1]


def forget() -> None:
    """Read the rules afresh at the next call (``alerts.sources.metrics.forget_caches``)."""
    global _rules
    _rules = None
