"""Rule evaluation over one poll cycle's readings: a pure function over plain data.

No ORM and no Redis: ``findings`` takes the rules, the latest readings of the cycle's
nodes and what the portal knows of each card (its node, pool and tenants), and answers
what is true now. Holding for a duration, opening and resolving events is the caller's
business (``alerts.sources.metrics``). Kept plain so it can be benchmarked at fleet size
(bench/alerts) and tested without a database.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alerts.choices import Condition, ScopeKind

# Conditions read from each card's latest reading, and those from the node's report.
CARD_METRICS = frozenset({
    Condition.TEMPERATURE, Condition.MEMORY_USED, Condition.UTILIZATION, Condition.POWER,
})  # fmt: skip
CARD_EVENTS = frozenset({Condition.XID, Condition.ECC_UNCORRECTABLE, Condition.GPU_LOST})
VIOLATIONS = {
    Condition.PROCESS_UNALLOCATED: "unallocated",
    Condition.PROCESS_OVER_SLICE: "over_memory",
    Condition.PROCESS_UNLIMITED: "unlimited",
}
CYCLE_CONDITIONS = CARD_METRICS | CARD_EVENTS | {Condition.NODE_OFFLINE, *VIOLATIONS}
NODE_TARGET = "node"
COMPARE = {"gt": operator.gt, "lt": operator.lt}
# Conditions that are a percentage of one field of another: (field, of field).
RATIOS = {
    Condition.MEMORY_USED: ("memory_used_mib", "memory_total_mib"),
    Condition.POWER: ("power_w", "power_limit_w"),
}


@dataclass(frozen=True, slots=True)
class RuleSpec:
    id: int
    key: str
    name: str
    condition: str
    comparison: str = "gt"
    threshold: float | None = None
    for_seconds: int = 0
    severity: str = "warning"
    renotify_seconds: int = 3600
    scope_kind: str = ScopeKind.ALL
    scope_id: int | None = None  # the pool's, node's or tenant's id


def scope_allows(rule: RuleSpec, tenant_id: int | None, pool_id: int | None) -> bool:
    """Whether a business fact of this tenant and pool is in the rule's scope."""
    if rule.scope_kind == ScopeKind.TENANT:
        return tenant_id == rule.scope_id
    if rule.scope_kind == ScopeKind.POOL:
        return pool_id == rule.scope_id
    return True


@dataclass(frozen=True, slots=True)
class Card:
    """What the portal knows of a card beside its reading."""

    gpu_id: int
    index: int
    node_id: int
    pool_id: int | None = None
    tenant_ids: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule true now for one target of one node (a card, a process, the node)."""

    rule_id: int
    node_id: int
    target: str  # unique within the node and rule: the card's UUID, "node", ...
    value: float | None = None
    uuid: str = ""
    labels: dict[str, str] = field(default_factory=dict)


def in_scope(rule: RuleSpec, node_id: int, card: Card | None) -> bool:
    kind = rule.scope_kind
    if kind == ScopeKind.ALL:
        return True
    if kind == ScopeKind.NODE:
        return node_id == rule.scope_id
    if card is None:
        return False
    if kind == ScopeKind.POOL:
        return card.pool_id == rule.scope_id
    return rule.scope_id in card.tenant_ids


def node_in_scope(rule: RuleSpec, node_id: int, cards: Iterable[Card]) -> bool:
    if rule.scope_kind in (ScopeKind.ALL, ScopeKind.NODE):
        return in_scope(rule, node_id, None)
    return any(in_scope(rule, node_id, card) for card in cards)


def card_value(condition: str, values: Mapping[str, Any]) -> float | None:
    """The number a metric condition compares, from one card's reading (None: not read)."""
    if condition == Condition.MEMORY_USED:
        used, total = values.get("memory_used_mib"), values.get("memory_total_mib")
        return used * 100.0 / total if used is not None and total else None
    if condition == Condition.POWER:
        power, limit = values.get("power_w"), values.get("power_limit_w")
        return power * 100.0 / limit if power is not None and limit else None
    return values.get(condition)


def findings(
    rules: Iterable[RuleSpec],
    readings: Mapping[int, Any],
    cards: Mapping[str, Card],
    failed: Iterable[int] = (),
) -> list[Finding]:
    """What is true now. ``readings``: node id -> telemetry.interface.NodeReading (or an
    object with ``cards`` by UUID, each with ``values``, and ``violations``); ``cards``:
    UUID -> Card; ``failed``: node ids whose agents did not answer this cycle."""
    rules = [r for r in rules if r.condition in CYCLE_CONDITIONS]
    # The metric rules that compare the same value, so each card's value is read once,
    # and the bounds past which any of them can hold, so most cards are passed at once.
    by_condition: dict[str, list[tuple[RuleSpec, Any, float]]] = {}
    for rule in rules:
        if rule.condition in CARD_METRICS and rule.threshold is not None:
            by_condition.setdefault(str(rule.condition), []).append(
                (rule, COMPARE[rule.comparison], rule.threshold)
            )
    groups = []
    for condition, group in by_condition.items():
        above = [t for r, _c, t in group if r.comparison == "gt"]
        below = [t for r, _c, t in group if r.comparison != "gt"]
        key, per = RATIOS.get(condition, (condition, None))
        groups.append((key, per, min(above, default=math.inf),
                       max(below, default=-math.inf), group))  # fmt: skip
    xid = [r for r in rules if r.condition == Condition.XID]
    ecc = [r for r in rules if r.condition == Condition.ECC_UNCORRECTABLE]
    lost = [r for r in rules if r.condition == Condition.GPU_LOST]
    offline = [r for r in rules if r.condition == Condition.NODE_OFFLINE]
    violation_rules = [(r, VIOLATIONS[r.condition]) for r in rules if r.condition in VIOLATIONS]
    out: list[Finding] = []
    append = out.append
    get_card = cards.get
    scoped_all = ScopeKind.ALL
    for node_id, reading in readings.items():
        for uuid, card_reading in reading.cards.items():
            values = card_reading.values
            get = values.get
            for key, per, above, below, group in groups:
                value = get(key)
                if value is None:
                    continue
                if per is not None:  # card_value, inlined: a percentage of another field
                    whole = get(per)
                    if not whole:
                        continue
                    value = value * 100.0 / whole
                if below <= value <= above:
                    continue
                card = get_card(uuid)
                for rule, compare, threshold in group:
                    if compare(value, threshold) and (
                        rule.scope_kind == scoped_all or in_scope(rule, node_id, card)
                    ):
                        append(Finding(rule.id, node_id, uuid, float(value), uuid))
            if xid and (code := get("xid_last")):
                card = get_card(uuid)
                for rule in xid:
                    if in_scope(rule, node_id, card):
                        append(Finding(rule.id, node_id, f"{uuid}:xid:{code}", float(code),
                                       uuid, {"xid": str(code)}))  # fmt: skip
            if ecc and (count := get("ecc_uncorrected_total")):
                card = get_card(uuid)
                for rule in ecc:
                    if count > (rule.threshold or 0) and in_scope(rule, node_id, card):
                        append(Finding(rule.id, node_id, uuid, float(count), uuid))
            if lost and get("health") == "lost":
                card = get_card(uuid)
                for rule in lost:
                    if in_scope(rule, node_id, card):
                        append(Finding(rule.id, node_id, uuid, None, uuid))
        for violation in reading.violations if violation_rules else ():
            uuid = str(violation.get("gpu_uuid") or "")
            card = get_card(uuid)
            for rule, kind in violation_rules:
                if violation.get("kind") != kind or not in_scope(rule, node_id, card):
                    continue
                user = str(violation.get("user") or "")
                allocation = str(violation.get("allocation_id") or "")
                labels = {"user": user} if user else {}
                if allocation:
                    labels["allocation"] = allocation
                used = violation.get("memory_used_mib")
                append(Finding(rule.id, node_id, f"{uuid}:{kind}:{allocation or user}",
                               None if used is None else float(used), uuid, labels))  # fmt: skip
    by_cards = any(r.scope_kind in (ScopeKind.POOL, ScopeKind.TENANT) for r in offline)
    for node_id in failed if offline else ():
        node_cards = [c for c in cards.values() if c.node_id == node_id] if by_cards else []
        for rule in offline:
            if node_in_scope(rule, node_id, node_cards):
                append(Finding(rule.id, node_id, NODE_TARGET))
    return out
