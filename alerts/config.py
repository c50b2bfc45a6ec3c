"""Rules and subscriptions: create, change, delete, each audited in its transaction.

Plain values in; a bad value raises ``django.core.exceptions.ValidationError`` naming the
field, and nothing changes. Who may call what is the pages' and API's check
(``alerts.permissions``); these check the values themselves, including that a
subscription's channel belongs to the subscription's owner and that its scope names a
pool, node or tenant the actor may see (``alerts.permissions.scope_targets``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import time
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.text import slugify
from django.utils.translation import gettext as _

from agents.models import Node
from alerts.choices import (
    CONDITION_KIND,
    SCOPE_NAME_FIELD,
    THRESHOLD_CONDITIONS,
    Comparison,
    Condition,
    RuleKind,
    ScopeKind,
    Severity,
)
from alerts.models import Channel, Rule, Subscription
from alerts.permissions import scope_targets
from alerts.rules import bump_rules_version
from audit.interface import record, snapshot
from pools.models import Pool
from quotas.models import Tenant

RULE_FIELDS = ("key", "name", "description", "condition", "comparison", "threshold",
               "for_seconds", "severity", "scope_kind", "pool", "node", "tenant",
               "renotify_seconds", "enabled")  # fmt: skip
SUBSCRIPTION_FIELDS = ("owner", "tenant", "channel", "min_severity", "scope_kind", "scope_name",
                       "quiet_start", "quiet_end", "enabled")  # fmt: skip
WEEK = 7 * 86400
# Bounds of each threshold, by its unit.
THRESHOLD_RANGE = {
    Condition.TEMPERATURE: (-50, 200), Condition.POWER: (0, 200),
    Condition.REQUEST_PENDING: (0, 24 * 366), Condition.ALLOCATION_EXPIRING: (0, 24 * 366),
}  # fmt: skip
SCOPE_MODELS = {ScopeKind.POOL: Pool, ScopeKind.NODE: Node, ScopeKind.TENANT: Tenant}


def _number(errors: dict, name: str, value: Any, low: float, high: float) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        errors[name] = [_("Enter a number.")]
        return None
    if not low <= value <= high:
        errors[name] = [_("Between %(low)s and %(high)s.") % {"low": low, "high": high}]
        return None
    return value


def _check_rule(rule: Rule, values: Mapping[str, Any]) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for name in ("name", "description", "key"):
        if name in values and not isinstance(values[name], str):
            errors[name] = [_("Enter text.")]
    if errors:
        return errors
    rule.name = values.get("name", rule.name).strip()
    if not rule.name or len(rule.name) > 200:
        errors["name"] = [_("Between 1 and %(n)s characters.") % {"n": 200}]
    rule.description = values.get("description", rule.description)
    if len(rule.description) > 2000:
        errors["description"] = [_("At most %(n)s characters.") % {"n": 2000}]
    if not rule.builtin:
        rule.key = slugify(values.get("key", rule.key) or rule.name)[:100]
        rule.condition = values.get("condition", rule.condition)
        if CONDITION_KIND.get(rule.condition) in (None, RuleKind.EXTERNAL):
            errors["condition"] = [_("Choose a condition the portal evaluates.")]
        elif Rule.objects.filter(key=rule.key).exclude(pk=rule.pk).exists():
            errors["key"] = [_("Another rule has this key.")]
    for name, choices in (("comparison", Comparison), ("severity", Severity),
                          ("scope_kind", ScopeKind)):  # fmt: skip
        value = values.get(name, getattr(rule, name))
        if value not in choices.values:
            errors[name] = [_("Choose one of the options.")]
        setattr(rule, name, value)
    low, high = THRESHOLD_RANGE.get(rule.condition, (0, 100))
    if "threshold" in values:
        rule.threshold = _number(errors, "threshold", values["threshold"], low, high)
    if rule.condition in THRESHOLD_CONDITIONS and rule.threshold is None:
        errors.setdefault("threshold", [_("This condition needs a threshold.")])
    for name, high in (("for_seconds", WEEK), ("renotify_seconds", 30 * 86400)):
        if name in values:
            value = _number(errors, name, values[name], 0, high)
            setattr(rule, name, int(value or 0))
    if rule.condition == Condition.ALLOCATION_UTILIZATION and rule.for_seconds < 300:
        errors["for_seconds"] = [_("A window of at least 5 minutes (300 s).")]
    if "enabled" in values:
        rule.enabled = bool(values["enabled"])
    rule.pool_id = rule.node_id = rule.tenant_id = None
    model = SCOPE_MODELS.get(rule.scope_kind)
    if model is not None:
        target = values.get("scope_id")
        if not isinstance(target, int) or not model.objects.filter(pk=target).exists():
            errors["scope_id"] = [_("Choose the rule's %(scope)s.") % {"scope": rule.scope_kind}]
        else:
            setattr(rule, f"{rule.scope_kind}_id", target)
    return errors


def save_rule(rule_id: int | None, values: Mapping[str, Any], *, actor, address: str | None) -> int:
    """Create (``rule_id`` None) or change a rule; its id. A built-in rule keeps its key
    and condition. ``scope_id``: the pool's, node's or tenant's id for those scopes."""
    with transaction.atomic():
        rule = Rule() if rule_id is None else Rule.objects.select_for_update().get(pk=rule_id)
        before = snapshot(rule, RULE_FIELDS) if rule_id else None
        errors = _check_rule(rule, values)
        if errors:
            raise ValidationError(errors)
        rule.save()
        record("alerts.rule.create" if rule_id is None else "alerts.rule.update", rule,
               actor=actor, address=address, tenant_id=rule.tenant_id, before=before,
               after=snapshot(rule, RULE_FIELDS))  # fmt: skip
        transaction.on_commit(bump_rules_version)
    return rule.pk


def delete_rule(rule_id: int, *, actor, address: str | None) -> None:
    with transaction.atomic():
        rule = Rule.objects.select_for_update().get(pk=rule_id)
        if rule.builtin:
            raise ValidationError({"key": [_("A built-in rule can be disabled, not deleted.")]})
        record("alerts.rule.delete", rule, actor=actor, address=address,
               tenant_id=rule.tenant_id, before=snapshot(rule, RULE_FIELDS))  # fmt: skip
        rule.delete()  # its post_delete bumps the rules' version (alerts.rules)


def _time(errors: dict, name: str, value: Any) -> time | None:
    if value in (None, ""):
        return None
    if isinstance(value, time):
        return value
    try:
        return time.fromisoformat(str(value))
    except ValueError:
        errors[name] = [_("Enter a time such as 22:00.")]
        return None


def _check_scope(errors: dict, sub: Subscription, values: Mapping[str, Any], actor,
                 stored: tuple[str, str] | None) -> None:  # fmt: skip
    """The scope names a pool, node or tenant that exists and that ``actor`` may see (else
    the subscription would wait for events that never come). The ``stored`` scope is not
    checked again: a pool since deleted does not block changing the quiet hours."""
    name = values.get("scope_name", sub.scope_name)
    if not isinstance(name, str) or len(name) > 255:
        errors["scope_name"] = [_("At most %(n)s characters.") % {"n": 255}]
        return
    kind = sub.scope_kind
    sub.scope_name = name.strip() if kind != ScopeKind.ALL else ""
    if kind not in SCOPE_NAME_FIELD or (kind, sub.scope_name) == stored:
        return
    if not sub.scope_name:
        errors["scope_name"] = [_("Name the pool, node or tenant.")]
        return
    targets = scope_targets(actor)[kind]
    if not targets.filter(**{SCOPE_NAME_FIELD[kind]: sub.scope_name}).exists():
        # The same answer for a tenant that does not exist and one the caller is not in.
        unknown = {ScopeKind.POOL: _("No pool has this slug."),
                   ScopeKind.NODE: _("No node has this name."),
                   ScopeKind.TENANT: _("None of your tenants has this slug.")}  # fmt: skip
        errors["scope_name"] = [unknown[kind]]


def _check_subscription(
    sub: Subscription, values: Mapping[str, Any], actor
) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    stored = (sub.scope_kind, sub.scope_name) if sub.pk else None
    if "channel" in values:
        channel = Channel.objects.filter(pk=values["channel"]).first() if isinstance(
            values["channel"], int) else None  # fmt: skip
        if channel is None or (channel.owner_id, channel.tenant_id) != (
            sub.owner_id,
            sub.tenant_id,
        ):
            errors["channel"] = [_("Choose one of the subscriber's own channels.")]
        else:
            sub.channel = channel
    elif sub.channel_id is None:
        errors["channel"] = [_("This field is required.")]
    for name, choices in (("min_severity", Severity), ("scope_kind", ScopeKind)):
        value = values.get(name, getattr(sub, name))
        if value not in choices.values:
            errors[name] = [_("Choose one of the options.")]
        else:
            setattr(sub, name, value)
    _check_scope(errors, sub, values, actor, stored)
    sub.quiet_start = _time(errors, "quiet_start", values.get("quiet_start", sub.quiet_start))
    sub.quiet_end = _time(errors, "quiet_end", values.get("quiet_end", sub.quiet_end))
    if (sub.quiet_start is None) != (sub.quiet_end is None):
        errors.setdefault("quiet_end", [_("Give both ends of the quiet hours, or neither.")])
    if "enabled" in values:
        sub.enabled = bool(values["enabled"])
    return errors


def _rule_ids(errors: dict, values: Mapping[str, Any]) -> list[int] | None:
    if "rules" not in values:
        return None
    ids = values["rules"]
    if not isinstance(ids, list | tuple) or not all(isinstance(i, int) for i in ids):
        errors["rules"] = [_("Choose rules.")]
        return None
    found = list(Rule.objects.filter(pk__in=ids).values_list("pk", flat=True))
    if len(found) != len(set(ids)):
        errors["rules"] = [_("Choose rules that exist.")]
    return found


def save_subscription(
    subscription_id: int | None, values: Mapping[str, Any], *, actor, address: str | None,
    owner_id: int | None = None, tenant_id: int | None = None,
) -> int:  # fmt: skip
    """Create (for ``owner_id`` or ``tenant_id``) or change a subscription; its id."""
    with transaction.atomic():
        if subscription_id is None:
            if (owner_id is None) == (tenant_id is None):
                raise ValidationError(
                    {"tenant": [_("A subscription belongs to a user or a tenant.")]}
                )
            sub = Subscription(owner_id=owner_id, tenant_id=tenant_id)
            before = None
        else:
            sub = Subscription.objects.select_for_update().get(pk=subscription_id)
            before = {**snapshot(sub, SUBSCRIPTION_FIELDS),
                      "rules": sorted(sub.rules.values_list("pk", flat=True))}  # fmt: skip
        errors = _check_subscription(sub, values, actor)
        rules = _rule_ids(errors, values)
        if errors:
            raise ValidationError(errors)
        sub.save()
        if rules is not None:
            sub.rules.set(rules)
        after = {**snapshot(sub, SUBSCRIPTION_FIELDS),
                 "rules": sorted(sub.rules.values_list("pk", flat=True))}  # fmt: skip
        action = "alerts.subscription.create" if before is None else "alerts.subscription.update"
        record(action, sub, actor=actor, address=address, tenant_id=sub.tenant_id,
               before=before, after=after)  # fmt: skip
    return sub.pk


def delete_subscription(subscription_id: int, *, actor, address: str | None) -> None:
    with transaction.atomic():
        sub = Subscription.objects.select_for_update().get(pk=subscription_id)
        record("alerts.subscription.delete", sub, actor=actor, address=address,
               tenant_id=sub.tenant_id, before=snapshot(sub, SUBSCRIPTION_FIELDS))  # fmt: skip
        sub.delete()
