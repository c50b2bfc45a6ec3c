"""Fleet services: turn poll results into inventory, latest readings and live pushes.

Built for one cycle of 1,000 nodes x 8 GPUs in well under a second: inventory is
written with a handful of set-based statements (rows change only when something
about a card changes; ``last_seen`` moves with one UPDATE per table), readings
go to the cache, rollup samples to the sample buffer, and the live push is built
from the snapshots in hand rather than read back from the database.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.choices import GpuHealth, GpuVendor, NodeSource, NodeState
from agents.gpu_agent import schema
from agents.models import GPU, Node, lock_inventory
from portal import crypto
from telemetry import card_claims, live, metrics, poller, readings, sample_buffer, signals
from telemetry.signals import PollCycle

logger = logging.getLogger(__name__)

# Identity fields of a card as the agent reports them: (model field, snapshot key, max length).
_GPU_IDENTITY = (("model", "name", 128), ("pci_bus_id", "pci_bus_id", 32), ("serial", "serial", 64))
_NODE_IDENTITY = ("hostname", "agent_version", "driver_version", "cuda_version")
# A card's last_seen in the database moves at most this often (rewriting 8,000 rows
# cost PostgreSQL more than the rest of a minute's cycles); pages and the API show the
# exact moment from the latest readings while the card is in them (readings.seen_at).
GPU_LAST_SEEN_RESOLUTION = timedelta(minutes=5)
_HEALTH = {
    "ok": GpuHealth.OK, "warning": GpuHealth.WARNING, "unhealthy": GpuHealth.UNHEALTHY,
    "lost": GpuHealth.LOST,
}  # fmt: skip
HEALTH_DETAIL_MAX = GPU._meta.get_field("health_detail").max_length


@dataclass
class PollSummary:
    polled: int = 0
    answered: int = 0
    failed: dict[int, str] = field(default_factory=dict)
    gpus_seen: int = 0
    gpus_created: int = 0
    went_offline: list[str] = field(default_factory=list)


# Decrypting 1,000 tokens every cycle costs a tenth of a second: remember each one,
# keyed by its ciphertext, so a changed token is decrypted afresh.
_tokens: dict[str, str] = {}


def _token(ciphertext: str) -> str:
    if ciphertext not in _tokens:
        if len(_tokens) > 100_000:
            _tokens.clear()
        _tokens[ciphertext] = crypto.decrypt_or_blank(ciphertext)
    return _tokens[ciphertext]


def nodes_due(now: datetime | None = None):
    """Agent nodes to poll now: all of them but the offline ones backing off."""
    # Half an interval of slack: a node due a moment after this cycle's start is not
    # left for the next one.
    soon = (now or timezone.now()) + timedelta(seconds=settings.GPU_POLL_INTERVAL / 2)
    return (
        Node.objects.filter(source=NodeSource.AGENT)
        .exclude(agent_url="")
        .filter(Q(poll_after__isnull=True) | Q(poll_after__lte=soon))
    )


def backoff_s(missed_polls: int) -> float:
    """How long an offline node waits before its next poll, after this many misses in a row.

    Up to going offline it is polled every cycle; then the wait doubles with each
    further miss, up to GPU_POLL_BACKOFF_MAX. So a rack that lost power costs a
    timeout per node now and then, not every cycle, and one that comes back is seen
    again within GPU_POLL_BACKOFF_MAX.
    """
    beyond = missed_polls - settings.NODE_OFFLINE_AFTER_MISSES
    if beyond <= 0:
        return 0.0
    return min(settings.GPU_POLL_INTERVAL * 2 ** min(beyond, 32), settings.GPU_POLL_BACKOFF_MAX)


def agent_targets(node_ids: Iterable[int] | None = None) -> list[poller.AgentTarget]:
    nodes = nodes_due()
    if node_ids is not None:
        nodes = nodes.filter(pk__any=list(node_ids))
    return [
        poller.AgentTarget(node_id=pk, url=url, token=_token(token))
        for pk, url, token in nodes.values_list("pk", "agent_url", "agent_token_encrypted")
    ]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection for the span of one cycle.

    A cycle allocates a few hundred thousand short-lived objects (parsed snapshots,
    rows, tiles), which set off dozens of collections that each walk every live object
    of the process: a third of the cycle's CPU, measured. Those objects form trees, not
    cycles, so reference counting frees them anyway; collection resumes right after.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def poll_fleet(node_ids: Iterable[int] | None = None) -> PollSummary:
    """One poll cycle over the given agent nodes (all of them by default)."""
    started = time.perf_counter()
    with _gc_paused():
        results = poller.poll(
            agent_targets(node_ids),
            timeout=settings.GPU_POLL_TIMEOUT,
            concurrency=settings.GPU_POLL_CONCURRENCY,
        )
        # The push carries this moment, so a page (and bench/live) can tell the fetch from
        # the recording that follows it.
        summary = record_poll_results(results, fetched_at=time.time())
        # Freed now, while collection is paused: alive when it resumes, the cycle's
        # hundred thousand parsed objects would be walked by the first collection.
        del results
    metrics.record_poll(time.perf_counter() - started, summary.polled, len(summary.failed))
    return summary


def _node_identity(snapshot: dict[str, Any]) -> dict[str, str]:
    # Types and lengths are the reading schema's (NODE_FIELDS), checked before we get here.
    return {
        "hostname": snapshot.get("hostname") or "",
        "agent_version": (snapshot.get("agent") or {}).get("version") or "",
        "driver_version": snapshot.get("driver_version") or "",
        "cuda_version": snapshot.get("cuda_version") or "",
    }


def _checked(results: list[poller.PollResult]) -> list[poller.PollResult]:
    """Every answer as the reading schema allows it: one the poller did not check (the
    Prometheus source's, a caller's own) is checked here, and refused for its node alone."""
    if all(r.checked or r.snapshot is None for r in results):
        return results
    cap = settings.GPU_MAX_CARDS_PER_NODE
    kept = []
    for result in results:
        if result.snapshot is not None and not result.checked:
            try:
                schema.check_snapshot(result.snapshot, cap)
            except schema.SnapshotError as exc:
                result = poller.PollResult(result.node_id, None, str(exc), result.duration_s)
        kept.append(result)
    return kept


def _error_text(error: str) -> str:
    """An error as a text column holds it: PostgreSQL refuses NUL in text (an agent's 500
    page is quoted in the error), and a screenful is enough. A failure always says something."""
    return error[:1000].replace("\x00", "\ufffd") or "no snapshot in the answer"


# A node's last_seen in the database moves at most this often while it keeps answering
# (rewriting 1,000 rows every cycle was most of PostgreSQL's work); pages and pushes
# show the exact moment from the latest readings (readings.summarize).
NODE_LAST_SEEN_RESOLUTION = timedelta(seconds=30)


def _record_answers(
    answered: dict[int, dict], known: dict[int, dict], now: datetime, conflicts: dict[int, str]
) -> list[int]:
    """Record the answering nodes; returns those that were offline (they came back)."""
    stale = now - NODE_LAST_SEEN_RESOLUTION
    touch, wake = [], []
    for pk, snapshot in answered.items():
        row = known[pk]
        identity = _node_identity(snapshot)
        if any(identity[f] != row[f] for f in _NODE_IDENTITY):
            Node.objects.filter(pk=pk).update(**identity)
        # An answer clears the error, but for a card claimed by two nodes (card_claims).
        error = conflicts.get(pk, "")
        if (
            row["missed_polls"] or row["last_error"] != error or row["poll_after"]
            or row["last_seen"] is None or row["last_seen"] < stale
        ):  # fmt: skip
            if error:
                Node.objects.filter(pk=pk).update(
                    last_seen=now, missed_polls=0, last_error=error, poll_after=None, updated=now
                )
            else:
                touch.append(pk)
        # Admin states (draining, maintenance) are never overridden by polling.
        if row["state"] == NodeState.OFFLINE:
            wake.append(pk)
    if touch:
        Node.objects.filter(pk__any=touch).update(
            last_seen=now, missed_polls=0, last_error="", poll_after=None, updated=now
        )
    if wake:
        Node.objects.filter(pk__any=wake, state=NodeState.OFFLINE).update(state=NodeState.ONLINE)
    return wake


def _record_failures(failed: dict[int, str], known: dict[int, dict], now: datetime) -> list[str]:
    # Nodes are grouped by what changes together: the error text and the back-off.
    groups: dict[tuple[str, float], list[int]] = {}
    for pk, error in failed.items():
        wait = backoff_s(known[pk]["missed_polls"] + 1)
        groups.setdefault((_error_text(error), wait), []).append(pk)
    for (error, wait), pks in groups.items():
        Node.objects.filter(pk__any=pks).update(
            missed_polls=F("missed_polls") + 1,
            last_error=error,
            poll_after=now + timedelta(seconds=wait) if wait else None,
            updated=now,
        )
    going = Node.objects.filter(
        pk__any=failed,
        state=NodeState.ONLINE,
        missed_polls__gte=settings.NODE_OFFLINE_AFTER_MISSES,
    )
    went_offline = list(going.values_list("name", flat=True))
    if went_offline:
        going.update(state=NodeState.OFFLINE)
        logger.warning("offline after missed polls: %s", ", ".join(went_offline))
    return went_offline


# Per node, what its cards looked like when last reconciled: (fingerprint, when, {uuid: pk}).
# A node whose cards are unchanged since (the common case: same UUIDs, indexes, models,
# health) skips the comparison with the database; every few minutes it is redone anyway.
_cards_seen: dict[int, tuple[int, float, dict[str, int]]] = {}
CARDS_RECHECK_S = 300


def _fingerprint(snapshot: dict) -> int:
    return hash(
        tuple([
            (g["uuid"], g["index"], g.get("name"), g.get("memory_total_mib"),
             g.get("pci_bus_id"), g.get("serial"), g.get("health"), g.get("vendor"),
             g.get("health_detail"))
            for g in snapshot["gpus"]
        ])
    )  # fmt: skip


@dataclass
class _Cards:
    """What recording the reported cards came to."""

    ids: dict[str, int]  # {uuid: GPU id} of the cards recorded as their reporter's
    created: int
    claimed: dict[int, set[str]]  # {node: UUIDs it reports that are another node's}
    conflicts: dict[int, str]  # {node: its claims, worded for last_error}


def _record_gpus(answered: dict[int, dict], now: datetime) -> _Cards:
    """Upsert the reported cards, and the claims of cards another node holds."""
    clock = time.monotonic()
    prints = {node_id: _fingerprint(snapshot) for node_id, snapshot in answered.items()}
    stable = {
        node_id
        for node_id, fingerprint in prints.items()
        if (seen := _cards_seen.get(node_id))
        and seen[0] == fingerprint
        and clock - seen[1] < CARDS_RECHECK_S
    }
    changed = {n: s for n, s in answered.items() if n not in stable}
    ids, created, vanished, claims = _reconcile_gpus(changed, now) if changed else ({}, 0, [], {})
    if changed:
        card_claims.record(changed, {n: set(c.values()) for n, c in claims.items()}, now)
    for node_id in stable:
        ids.update(_cards_seen[node_id][2])
    GPU.objects.filter(node_id__any=answered, last_seen__lt=now - GPU_LAST_SEEN_RESOLUTION).exclude(
        pk__any=vanished
    ).update(last_seen=now)
    conflicts = card_claims.messages(answered)

    def remember() -> None:  # only what was committed
        for node_id, snapshot in changed.items():
            cards = {g["uuid"]: ids[g["uuid"]] for g in snapshot["gpus"] if g["uuid"] in ids}
            _cards_seen[node_id] = (prints[node_id], clock, cards)
        # A node in a conflict is compared with the database every cycle, so an admin's
        # decision (a card moved or deleted) shows at its next answer.
        for node_id in conflicts:
            _cards_seen.pop(node_id, None)

    transaction.on_commit(remember)
    return _Cards(ids, created, {n: set(c) for n, c in claims.items()}, conflicts)


def _reconcile_gpus(
    answered: dict[int, dict], now: datetime
) -> tuple[dict[str, int], int, list[int], dict[int, dict[str, int]]]:
    """Compare the reported cards with the database and write the differences.

    Cards an answering agent no longer lists have fallen off the bus: kept, marked lost.
    A card the inventory has on another node stays there (telemetry.card_claims).
    Returns {uuid: pk} of the reported cards, how many were created, the lost ones, and
    the claims: {node: {uuid: pk}} of the cards it reports that another node holds.
    """
    reported: dict[str, tuple[int, dict]] = {}
    # The same card from two nodes of this cycle: the first (lowest id) is compared below,
    # the others are claims once we know where the card is.
    also: list[tuple[int, str]] = []
    for node_id in sorted(answered):
        for gpu in answered[node_id]["gpus"]:
            if gpu["uuid"] in reported:
                also.append((node_id, gpu["uuid"]))
            else:
                reported[gpu["uuid"]] = (node_id, gpu)
    columns = ("uuid", "pk", "node_id", "index", "memory_total_mib", "health", "health_detail",
               "vendor")  # fmt: skip
    columns += tuple(f for f, _, _ in _GPU_IDENTITY)
    rows = {
        r[0]: dict(zip(columns, r, strict=True))
        for r in GPU.objects.filter(node_id__any=answered).values_list(*columns)
    }
    # Cards that moved here from another node, or were never seen before.
    elsewhere = [uuid for uuid in reported if uuid not in rows]
    # A card a Kubernetes cluster's node holds (clusters.inventory, read-only) moves to the
    # agent or Prometheus node that reports it: the richer source wins, no claim is made.
    yielding: set[str] = set()
    if elsewhere:
        for r in GPU.objects.filter(uuid__any=elsewhere).values_list(*columns):
            rows[r[0]] = dict(zip(columns, r, strict=True))
        yielding = set(
            GPU.objects.filter(uuid__any=elsewhere, node__source=NodeSource.KUBERNETES)
            .values_list("uuid", flat=True)
        )  # fmt: skip

    to_create, to_update = [], []
    claims: dict[int, dict[str, int]] = {}
    for uuid, (node_id, data) in reported.items():
        row = rows.get(uuid)
        if row is not None and row["node_id"] != node_id and uuid not in yielding:
            claims.setdefault(node_id, {})[uuid] = row["pk"]
            continue
        wanted = {
            "node_id": node_id,
            "index": data["index"],
            # The schema let only known words through; absent (NVML agents before #25,
            # Prometheus) is ok. No vendor: an NVIDIA card, read through NVML.
            "health": _HEALTH.get(data.get("health"), GpuHealth.OK),
            "health_detail": (data.get("health_detail") or "")[:HEALTH_DETAIL_MAX],
            "vendor": data.get("vendor") or GpuVendor.NVIDIA,
        }
        if data.get("memory_total_mib"):
            wanted["memory_total_mib"] = int(data["memory_total_mib"])
        for model_field, key, size in _GPU_IDENTITY:
            if data.get(key):
                wanted[model_field] = str(data[key])[:size]
        if row is None:
            wanted.setdefault("model", "unknown")
            to_create.append(GPU(uuid=uuid, last_seen=now, **wanted))
        elif any(row[k] != v for k, v in wanted.items()):
            fields = {k: v for k, v in row.items() if k not in ("pk", "uuid")}
            to_update.append(GPU(pk=row["pk"], uuid=uuid, **{**fields, **wanted}, updated=now))
    if to_create:
        GPU.objects.bulk_create(to_create)
    if to_update:
        fields = ["node_id", "index", "memory_total_mib", "health", "health_detail", "vendor",
                  "updated"]  # fmt: skip
        GPU.objects.bulk_update(to_update, fields + [f for f, _, _ in _GPU_IDENTITY])

    ids = {uuid: rows[uuid]["pk"] for uuid in reported if uuid in rows}
    ids.update({g.uuid: g.pk for g in to_create})
    holder = {uuid: node_id for uuid, (node_id, _) in reported.items() if uuid not in rows}
    holder.update({uuid: r["node_id"] for uuid, r in rows.items()})
    holder.update({uuid: reported[uuid][0] for uuid in yielding})
    for node_id, uuid in also:
        if holder[uuid] != node_id:
            claims.setdefault(node_id, {})[uuid] = ids[uuid]
    # Lost: a card of an answering node that this node no longer lists.
    listed = {(node_id, gpu["uuid"]) for node_id, snap in answered.items() for gpu in snap["gpus"]}
    vanished = [
        r["pk"] for uuid, r in rows.items()
        if r["node_id"] in answered and (r["node_id"], uuid) not in listed
    ]  # fmt: skip
    if vanished:
        GPU.objects.filter(pk__any=vanished).exclude(health=GpuHealth.LOST).update(
            health=GpuHealth.LOST, updated=now
        )
    return ids, len(to_create), vanished, claims


def record_poll_results(
    results: list[poller.PollResult],
    *,
    now: datetime | None = None,
    fetched_at: float | None = None,
) -> PollSummary:
    """Record one cycle's answers and failures, then publish them once committed."""
    now = now or timezone.now()
    summary = PollSummary(polled=len(results))
    if not results:
        return summary
    results = _checked(results)
    columns = (
        "pk", "name", "state", "missed_polls", "last_seen", "last_error", "poll_after",
        *_NODE_IDENTITY,
    )  # fmt: skip
    with transaction.atomic():
        # Node and card deletions wait for this cycle to commit, and a cycle for them: a
        # node read here stays until the cards written for it are committed (agents.models).
        lock_inventory()
        known = {
            row[0]: dict(zip(columns, row, strict=True))
            for row in Node.objects.filter(pk__any=[r.node_id for r in results]).values_list(
                *columns
            )
        }
        # A node deleted while we were polling is simply skipped.
        answered = {r.node_id: r.snapshot for r in results if r.ok and r.node_id in known}
        failed = {r.node_id: r.error for r in results if not r.ok and r.node_id in known}
        cards = _record_gpus(answered, now)
        came_back = _record_answers(answered, known, now, cards.conflicts)
        summary.went_offline = _record_failures(failed, known, now)
        gpu_ids, summary.gpus_created = cards.ids, cards.created
        summary.answered, summary.failed, summary.gpus_seen = len(answered), failed, len(gpu_ids)
        # A card another node holds is read from its holder only: in pages and history.
        for node_id, uuids in cards.claimed.items():
            snap = answered[node_id]
            answered[node_id] = {
                **snap,
                "gpus": [g for g in snap["gpus"] if g["uuid"] not in uuids],
            }
        latest = readings.store_latest(answered)
        sample_buffer.buffer_samples(answered, gpu_ids, now)
        tiles = _tile_rows(known, answered, failed, summary.went_offline, now, cards.conflicts)
        transaction.on_commit(
            lambda: live.publish_nodes(list(known), latest, tiles, fetched_at=fetched_at)
        )
        cycle = signals.PollCycle(
            at=now, answered=tuple(answered), failed=dict(failed),
            went_offline=tuple(summary.went_offline), came_back=tuple(came_back),
        )  # fmt: skip
        transaction.on_commit(lambda: _announce(cycle, latest))
    return summary


def _announce(cycle: PollCycle, latest: dict[int, dict[str, Any]]) -> None:
    # The receivers (alerts, pools, quotas) read the cycle's readings: from what was just
    # stored, not back from Redis.
    with readings.cycle_readings(latest):
        signals.poll_cycle_recorded.send_robust(sender=PollCycle, cycle=cycle)


def _tile_rows(known, answered, failed, went_offline, now, conflicts) -> list[dict[str, Any]]:
    """The nodes as they now stand, for the push: what was read, with this cycle applied."""
    offline = set(went_offline)
    rows = []
    for pk, row in known.items():
        state, last_seen, error = row["state"], row["last_seen"], row["last_error"]
        if pk in answered:
            last_seen, error = now, conflicts.get(pk, "")
            state = NodeState.ONLINE if state == NodeState.OFFLINE else state
        elif pk in failed:
            error = _error_text(failed[pk])
            state = NodeState.OFFLINE if row["name"] in offline else state
        rows.append({"pk": pk, "name": row["name"], "state": state, "last_seen": last_seen,
                     "last_error": error})  # fmt: skip
    return rows
