"""Agents' interface for the inventory sources above it that only read a node's cards (a
Kubernetes cluster's nodes, clusters.inventory): one node and the cards it reports, recorded
as the poll cycle records an agent's, with the same rules.

A card is its UUID wherever it goes. A card the inventory has on a node of another source
(an agent's, Prometheus's) stays there: the richer source wins, and the telemetry cycle moves
a read-only source's card to the agent or Prometheus node that reports it. A card of the
node it no longer reports is kept, marked lost (allocations point at it). Nothing is
written when nothing changed, so a source may record every pass.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.choices import ADMIN_STATES, READ_ONLY_SOURCES, GpuHealth, GpuVendor, NodeState
from agents.models import GPU, Node, lock_inventory

logger = logging.getLogger(__name__)

# last_seen moves at most this often while nothing else changes (no write every pass).
LAST_SEEN_RESOLUTION = timedelta(minutes=5)
_ERROR_MAX = 1000
_DETAIL_MAX = GPU._meta.get_field("health_detail").max_length


@dataclass(frozen=True, slots=True)
class SeenCard:
    """A card as a read-only source saw it; checked by the source (lengths, ranges)."""

    uuid: str
    index: int
    model: str
    memory_mib: int
    healthy: bool = True
    detail: str = ""  # why not healthy, in the source's words
    vendor: str = GpuVendor.NVIDIA


@dataclass
class Recorded:
    node_id: int
    created: list[int] = field(default_factory=list)  # GPU ids made for this node
    changed: int = 0  # cards updated (moved here, or model, memory, health changed)
    lost: int = 0  # cards of the node newly marked lost
    elsewhere: dict[str, str] = field(default_factory=dict)  # {uuid: the node holding it}
    node_written: bool = False


def _free_name(wanted: str, suffix: str) -> str:
    """``wanted`` if no node has that name, else ``wanted`` + suffix (then -2, -3 ...)."""
    base = wanted[:255]
    candidates = [base, f"{wanted[: 255 - len(suffix)]}{suffix}"]
    taken = set(Node.objects.filter(name__in=candidates).values_list("name", flat=True))
    for candidate in candidates:
        if candidate not in taken:
            return candidate
    n = 2
    while True:
        tail = f"{suffix}-{n}"
        candidate = f"{wanted[: 255 - len(tail)]}{tail}"
        if not Node.objects.filter(name=candidate).exists():
            return candidate
        n += 1


def _node(
    source: str, node_id: int | None, name: str, suffix: str, values: dict, now: datetime
) -> tuple[Node, bool]:
    node = Node.objects.filter(pk=node_id, source=source).first() if node_id else None
    if node is None:
        node = Node(name=_free_name(name, suffix), source=source, last_seen=now, **values)
        try:
            with transaction.atomic():
                node.save()
        except IntegrityError:  # the name taken since we looked: the next pass retries
            logger.warning("could not create a %s node named %s", source, node.name)
            raise
        return node, True
    changes = {k: v for k, v in values.items() if getattr(node, k) != v}
    if node.state in ADMIN_STATES:  # an admin's draining or maintenance stays
        changes.pop("state", None)
    if values.get("state") == NodeState.ONLINE and (
        node.last_seen is None or node.last_seen < now - LAST_SEEN_RESOLUTION
    ):
        changes["last_seen"] = now
    if changes:
        Node.objects.filter(pk=node.pk).update(**changes, updated=now)
        for key, value in changes.items():
            setattr(node, key, value)
    return node, bool(changes)


def record_read_only_node(
    *,
    source: str,
    node_id: int | None,
    name: str,
    name_suffix: str,
    hostname: str,
    labels: Mapping[str, str],
    online: bool,
    error: str = "",
    cards: Iterable[SeenCard] = (),
    now: datetime | None = None,
) -> Recorded:
    """Record one node of a read-only source and the cards it reports now.

    ``node_id`` is the node recorded for it before (None, or a node gone: a new one is made,
    named ``name``, or ``name`` + ``name_suffix`` where an agent node has that name). The
    node is online or offline as told (an admin's draining or maintenance stays), its error
    as told. Returns what was written."""
    if source not in READ_ONLY_SOURCES:
        raise ValueError(f"{source!r} is not a read-only source")
    now = now or timezone.now()
    cards = list(cards)
    values = {
        "hostname": hostname[:255],
        "labels": dict(labels),
        "state": NodeState.ONLINE if online else NodeState.OFFLINE,
        "last_error": error[:_ERROR_MAX].replace("\x00", "\ufffd"),
    }
    with transaction.atomic():
        lock_inventory()  # node and card deletions wait for this, as for a poll cycle
        node, written = _node(source, node_id, name, name_suffix, values, now)
        result = Recorded(node.pk, node_written=written)
        columns = ("pk", "uuid", "node_id", "node__name", "node__source", "index", "model",
                   "memory_total_mib", "health", "health_detail", "vendor",
                   "last_seen")  # fmt: skip
        rows = {
            r[1]: dict(zip(columns, r, strict=True))
            for r in GPU.objects.filter(node_id=node.pk).values_list(*columns)
        }
        others = [c.uuid for c in cards if c.uuid not in rows]
        if others:
            for r in GPU.objects.filter(uuid__in=others).values_list(*columns):
                rows[r[1]] = dict(zip(columns, r, strict=True))
        to_create, reported = [], set()
        for card in cards:
            reported.add(card.uuid)
            wanted = {
                "node_id": node.pk, "index": card.index, "model": card.model[:128],
                "memory_total_mib": card.memory_mib, "vendor": card.vendor,
                "health": GpuHealth.OK if card.healthy else GpuHealth.UNHEALTHY,
                "health_detail": "" if card.healthy else card.detail[:_DETAIL_MAX],
            }  # fmt: skip
            row = rows.get(card.uuid)
            if row is None:
                to_create.append(GPU(uuid=card.uuid, last_seen=now, **wanted))
                continue
            # Another source's card stays there; another read-only node's moves here only
            # once that node lost it (a card really moved, not two sources at once).
            if row["node_id"] != node.pk and (
                row["node__source"] != source or row["health"] != GpuHealth.LOST
            ):
                result.elsewhere[card.uuid] = row["node__name"]
                continue
            if any(row[k] != v for k, v in wanted.items()):
                row["last_seen"] = now
                GPU.objects.filter(pk=row["pk"]).update(**wanted, last_seen=now, updated=now)
                result.changed += 1
        if to_create:
            made = GPU.objects.bulk_create(to_create)
            result.created = [g.pk for g in made]
        vanished = [
            r["pk"] for uuid, r in rows.items()
            if r["node_id"] == node.pk and uuid not in reported and r["health"] != GpuHealth.LOST
        ]  # fmt: skip
        if vanished:
            result.lost = GPU.objects.filter(pk__in=vanished).update(
                health=GpuHealth.LOST, updated=now
            )
        stale = now - LAST_SEEN_RESOLUTION
        seen = [
            r["pk"] for u, r in rows.items()
            if u in reported and r["node_id"] == node.pk
            and (r["last_seen"] is None or r["last_seen"] < stale)
        ]  # fmt: skip
        if seen and online:
            GPU.objects.filter(pk__in=seen).update(last_seen=now)
    return result


def node_cards(node_ids: Iterable[int]) -> dict[int, list[GPU]]:
    """The cards of these nodes, by node, in index order."""
    found: dict[int, list[GPU]] = {}
    for gpu in GPU.objects.filter(node_id__in=list(node_ids)).order_by("node_id", "index"):
        found.setdefault(gpu.node_id, []).append(gpu)
    return found


__all__ = ["Recorded", "SeenCard", "node_cards", "record_read_only_node"]
