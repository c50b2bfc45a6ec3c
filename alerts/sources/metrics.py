"""Rules evaluated after each poll cycle (telemetry's ``poll_cycle_recorded``).

The readings come from ``telemetry.interface.latest`` for the cycle's nodes; what the
portal knows of each card (node, pool, tenants) is a per-process copy refreshed every
TOPOLOGY_TTL_S; the enabled rules are ``alerts.rules``' per-process copy, refreshed when
their version in Redis changes. How long each rule has held for each target is kept in
Redis, one hash per node (``<rule id>|<target>`` -> ``p|<since>`` pending, or
``f|<event id>|<look again at>`` firing) and a set of the nodes that have one: a quiet
cycle costs the evaluation, two Redis round trips (one more for nodes with state) and
no query. Each event keeps its place in that state (``Event.state_key``): after Redis
lost its data, the first cycle writes the open events back (``rebuild_state``), and a
pending for-duration starts again.

Windowed rules (an allocated card's utilization over hours) read ``card_usage`` at most
once a WINDOW_EVERY_S, from whichever worker's cycle comes first.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from agents.models import GPU, Node
from alerts import events, rules, summaries
from alerts.choices import Condition, ScopeKind
from alerts.evaluate import (
    CYCLE_CONDITIONS,
    NODE_TARGET,
    Card,
    Finding,
    RuleSpec,
    findings,
    in_scope,
)
from alerts.rules import enabled_rules, fingerprint_of
from pools.choices import AllocationState
from pools.models import Allocation, Pool
from portal import redis_client
from quotas.models import Tenant
from telemetry.interface import PollCycle, card_usage, latest

logger = logging.getLogger(__name__)
TOPOLOGY_TTL_S = 30.0
WINDOW_EVERY_S = 60
# Rules whose summary shows the threshold beside the value (a count's is not worth it).
THRESHOLD_SHOWN = frozenset({
    Condition.TEMPERATURE, Condition.MEMORY_USED, Condition.UTILIZATION, Condition.POWER,
    Condition.ALLOCATION_UTILIZATION, Condition.PROCESS_UNALLOCATED,
    Condition.PROCESS_OVER_SLICE, Condition.PROCESS_UNLIMITED,
})  # fmt: skip


def _state_key(node_id: int) -> str:
    return redis_client.key("alerts", "state", node_id)


def _nodes_key() -> str:
    return redis_client.key("alerts", "state-nodes")


def _kept_key() -> str:
    # Present while Redis keeps the state; absent after a restart without persistence.
    return redis_client.key("alerts", "state-kept")


def rebuild_state() -> int:
    """Write the state of every open event of a per-cycle rule back into Redis, as
    firing and due for a look: the next cycle keeps or resolves each one. Without it an
    event that fired before Redis lost its data would never resolve. How many."""
    redis = redis_client.client()
    pipe = redis.pipeline(transaction=False)
    nodes = set()
    open_events = events.open_with_state_keys()
    for event_id, state_key in open_events:
        node_id, _, name = state_key.partition("|")
        if node_id.isdigit() and "|" in name:
            pipe.hsetnx(_state_key(int(node_id)), name, f"f|{event_id}|0")
            nodes.add(int(node_id))
    if nodes:
        pipe.sadd(_nodes_key(), *nodes)
    pipe.execute()
    return len(nodes)


@dataclass(slots=True)
class Topology:
    cards: dict[str, Card] = field(default_factory=dict)
    node_names: dict[int, str] = field(default_factory=dict)
    pool_slugs: dict[int, str] = field(default_factory=dict)
    tenant_slugs: dict[int, str] = field(default_factory=dict)
    allocated_since: dict[int, datetime] = field(default_factory=dict)  # by GPU id
    built: float = 0.0


def build_topology() -> Topology:
    topo = Topology(built=time.monotonic())
    tenants_of: dict[int, set[int]] = {}
    live = Allocation.objects.filter(
        state__in=(AllocationState.ACTIVE, AllocationState.STRANDED), gpu__isnull=False
    ).values_list("gpu_id", "lease__gpu_request__tenant_id", "placed_at")
    for gpu_id, tenant_id, placed_at in live:
        if tenant_id is not None:
            tenants_of.setdefault(gpu_id, set()).add(tenant_id)
        if placed_at is not None:
            since = topo.allocated_since.get(gpu_id)
            topo.allocated_since[gpu_id] = placed_at if since is None else min(since, placed_at)
    rows = GPU.objects.values_list("uuid", "pk", "index", "node_id", "pool_card__pool_id")
    for uuid, pk, index, node_id, pool_id in rows:
        topo.cards[uuid] = Card(pk, index, node_id, pool_id, frozenset(tenants_of.get(pk, ())))
    topo.node_names = dict(Node.objects.values_list("pk", "name"))
    topo.pool_slugs = dict(Pool.objects.values_list("pk", "slug"))
    topo.tenant_slugs = dict(Tenant.objects.values_list("pk", "slug"))
    return topo


_topology: Topology | None = None


def topology() -> Topology:
    global _topology
    if _topology is None or time.monotonic() - _topology.built > TOPOLOGY_TTL_S:
        _topology = build_topology()
    return _topology


def forget_caches() -> None:
    """Tests and the demo: read rules and cards afresh at the next cycle."""
    global _topology
    _topology = None
    rules.forget()


def occurrence(rule: RuleSpec, f: Finding, topo: Topology) -> events.Occurrence:
    node = topo.node_names.get(f.node_id, str(f.node_id))
    labels: dict[str, str] = {"node": node}
    scope = f"node:{node}"
    card = topo.cards.get(f.uuid) if f.uuid else None
    if f.uuid:
        labels["uuid"] = f.uuid
        if card is not None:
            labels["gpu"] = str(card.index)
            scope += f" gpu:{card.index}"
            if card.pool_id in topo.pool_slugs:
                labels["pool"] = topo.pool_slugs[card.pool_id]
    tenant_id = rule.scope_id if rule.scope_kind == ScopeKind.TENANT else None
    if tenant_id is not None:
        labels["tenant"] = topo.tenant_slugs.get(tenant_id, str(tenant_id))
    labels.update(f.labels)
    # Written in each reader's language when shown (alerts.summaries), with its unit.
    key, params = summaries.CONDITION, {"scope": scope, "condition": str(rule.condition)}
    if f.value is not None:
        labels["value"] = f"{f.value:.0f}" if f.value >= 10 else f"{f.value:.1f}"
        key, params["value"] = summaries.METRIC, f.value
        if rule.threshold is not None and rule.condition in THRESHOLD_SHOWN:
            params.update(threshold=rule.threshold, comparison=str(rule.comparison))
    fingerprint = fingerprint_of(rule.key, f"{f.node_id}|{f.target}", {})
    return events.Occurrence(fingerprint, scope, labels=labels, tenant_id=tenant_id,
                             summary_key=key, summary_params=params,
                             state_key=f"{f.node_id}|{f.rule_id}|{f.target}")  # fmt: skip


def evaluate_cycle(cycle: PollCycle, *, now: datetime | None = None) -> int:
    """Evaluate the cycle's nodes; how many events were fired or resolved."""
    rules = [r for r in enabled_rules() if r.condition in CYCLE_CONDITIONS]
    by_id = {r.id: r for r in rules}
    node_ids = list(dict.fromkeys((*cycle.answered, *cycle.failed)))
    if not node_ids:
        return 0
    now = now or cycle.at
    readings = latest(cycle.answered) if rules else {}
    topo = topology()
    found = {
        (f.node_id, f"{f.rule_id}|{f.target}"): f
        for f in findings(rules, readings, topo.cards, cycle.failed)
    }
    redis = redis_client.client()
    # Only nodes with some state have a hash: one round trip tells which of the chunk's,
    # and whether Redis still keeps the state at all (the first cycle after it lost it
    # writes the open events back, then asks again).
    pipe = redis.pipeline(transaction=False)
    pipe.set(_kept_key(), 1, nx=True)
    pipe.smismember(_nodes_key(), node_ids)
    lost, members = pipe.execute()
    if lost and rebuild_state():
        members = redis.smismember(_nodes_key(), node_ids)
    with_state = [n for n, on in zip(node_ids, members, strict=True) if on]
    stored: dict[int, dict] = {node_id: {} for node_id in node_ids}
    if with_state:
        pipe = redis.pipeline(transaction=False)
        for node_id in with_state:
            pipe.hgetall(_state_key(node_id))
        stored.update(zip(with_state, pipe.execute(), strict=True))
    if not found and not with_state:
        return 0
    ts = now.timestamp()
    writes, deletes, changed = {}, {}, 0
    for (node_id, name), finding in found.items():
        old = stored[node_id].get(name.encode(), b"").decode()
        rule = by_id[finding.rule_id]
        state = old.split("|")
        if old.startswith("f|") and ts < float(state[2]):
            continue
        if not old.startswith("f|") and rule.for_seconds > 0:
            since = float(state[1]) if old.startswith("p|") else ts
            if ts - since < rule.for_seconds:
                if not old:
                    writes.setdefault(node_id, {})[name] = f"p|{ts}"
                continue
        event_id, again = events.fire(rule, occurrence(rule, finding, topo), now=now)
        changed += not old.startswith("f|")
        writes.setdefault(node_id, {})[name] = f"f|{event_id}|{again}"
    for node_id, fields in stored.items():
        readable = node_id in readings
        for raw, value in fields.items():
            name = raw.decode()
            if (node_id, name) in found:
                continue
            rule_id, target = name.split("|", 1)
            # A node that did not answer tells nothing of its cards: only "node" clears.
            if not readable and target != NODE_TARGET and int(rule_id) in by_id:
                continue
            deletes.setdefault(node_id, []).append(raw)
            if value.startswith(b"f|"):
                changed += events.clear(int(value.split(b"|")[1]), now=now)
    pipe = redis.pipeline(transaction=False)
    for node_id, fields in writes.items():
        pipe.hset(_state_key(node_id), mapping=fields)
    if writes:
        pipe.sadd(_nodes_key(), *writes)
    emptied = []
    for node_id, fields in deletes.items():
        pipe.hdel(_state_key(node_id), *fields)
        if node_id not in writes and len(fields) == len(stored[node_id]):
            emptied.append(node_id)
    if emptied:
        pipe.srem(_nodes_key(), *emptied)
    pipe.execute()
    return changed


def evaluate_windows(*, now: datetime | None = None, force: bool = False) -> int:
    """Windowed rules, at most once a WINDOW_EVERY_S across all workers."""
    rules = [r for r in enabled_rules() if r.condition == Condition.ALLOCATION_UTILIZATION]
    if not rules:
        return 0
    due_key = redis_client.key("alerts", "windows-due")
    if not force and not redis_client.client().set(due_key, 1, nx=True, ex=WINDOW_EVERY_S):
        return 0
    now = now or timezone.now()
    topo = topology()
    by_gpu = {card.gpu_id: (uuid, card) for uuid, card in topo.cards.items()}
    changed = 0
    for rule in rules:
        window = timedelta(seconds=max(rule.for_seconds, 60))
        # Cards allocated for the whole window, in the rule's scope.
        gpu_ids = [gid for gid, since in topo.allocated_since.items()
                   if since <= now - window and gid in by_gpu]  # fmt: skip
        usage = card_usage(gpu_ids, now - window, now) if gpu_ids else {}
        wanted = {}
        for gpu_id, row in usage.items():
            uuid, card = by_gpu[gpu_id]
            value = row.values.get("util_avg")
            if value is None or not row.samples or rule.threshold is None:
                continue
            hit = value < rule.threshold if rule.comparison == "lt" else value > rule.threshold
            if hit and in_scope(rule, card.node_id, card):
                what = occurrence(rule, Finding(rule.id, card.node_id, uuid, value, uuid), topo)
                wanted[what.fingerprint] = what
        _fired, cleared = events.reconcile(rule, wanted, now=now)
        changed += cleared
    return changed


def on_poll_cycle_recorded(sender, cycle: PollCycle, **kwargs) -> None:
    try:
        evaluate_cycle(cycle)
        evaluate_windows()
    except Exception:  # never the poller's problem; logged with the cycle
        logger.exception("alert evaluation failed for a cycle of %s nodes", len(cycle.answered))
