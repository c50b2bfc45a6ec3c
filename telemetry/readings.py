"""Latest readings per node, kept in Redis (an in-process one on the embedded default).

The database holds inventory (what exists, its health, when it was last seen);
Redis holds what the cards read a moment ago, one hash field per node, written
with one command per poll cycle. Pages and websockets are built from both: the
fleet page from per-node summaries, a node page from its cards.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

import orjson
from django.db.models import Count

from agents.choices import vendor_label
from agents.gpu_agent import schema
from agents.models import GPU, Node
from portal import redis_client

# Readings older than this are worthless for a live view and are not shown.
LATEST_TTL_S = 600

# Reading fields the browser shows, copied from the agent's snapshot as they are.
LIVE_GPU_FIELDS = schema.LIVE_GPU_FIELDS
_NODE_FIELDS = ("pk", "name", "state", "last_seen", "last_error")


def _latest_key() -> str:
    # All nodes' latest readings in one Redis hash: one HSET per cycle, one HMGET per read.
    return redis_client.key("fleet", "latest")


def _fresh(reduced: dict, now: float) -> bool:
    # A node whose agent stopped answering keeps its last readings this long.
    return now - (reduced.get("stored_at") or 0) < LATEST_TTL_S


# What is kept of each card is the agent's "portal view" of a snapshot (docs/agent.md):
# the reading schema's fields, which agents that know the view send already; a full
# snapshot is cut down to them here.


def _portal_view(gpu: dict[str, Any]) -> dict[str, Any]:
    kept = {f: gpu[f] for f in schema.GPU_FIELD_NAMES if f in gpu}
    if processes := gpu.get("processes"):
        names = schema.PROCESS_FIELD_NAMES
        kept["processes"] = [{f: p[f] for f in names if f in p} for p in processes]
    return kept


def _report(snapshot: dict[str, Any], kept: dict[str, Any]) -> None:
    """The agent's slices report, checked by the reading schema (bounded lists of typed
    entries), kept with its declared fields only: a node's report is small, and pages
    read it as it is stored."""
    allocations = snapshot.get(schema.ALLOCATIONS)
    violations = snapshot.get(schema.VIOLATIONS)
    if allocations is None and violations is None:
        return
    names = schema.ALLOCATION_FIELD_NAMES
    kept[schema.ALLOCATIONS] = [{f: a[f] for f in names if f in a} for a in allocations or ()]
    names = schema.VIOLATION_FIELD_NAMES
    kept[schema.VIOLATIONS] = [{f: v[f] for f in names if f in v} for v in violations or ()]
    kept["desired_generation"] = snapshot.get("desired_generation")


def reduce_snapshot(snapshot: dict[str, Any]) -> dict[str, Any]:
    """What the live views need of a snapshot: its cards by UUID, each as the portal view,
    and the agent's slices report when it sent one.

    A snapshot in the portal view is kept as it came (the poller validated it): at
    8,000 cards a cycle, copying fields that are already the right ones costs more
    than all the rest of storing them.
    """
    gpus = snapshot["gpus"]
    if snapshot.get("view") != "portal":
        gpus = [_portal_view(gpu) for gpu in gpus]
    kept = {"collected_at": snapshot.get("collected_at"), "gpus": {g["uuid"]: g for g in gpus}}
    _report(snapshot, kept)
    return kept


def seen_at(
    recorded: datetime | None, latest: dict[str, Any] | None, uuid: str = ""
) -> datetime | None:
    """When a node (or, given its UUID, a card) was last seen: the database keeps that to
    a resolution (services.NODE_LAST_SEEN_RESOLUTION, GPU_LAST_SEEN_RESOLUTION); the
    latest readings, while fresh, say exactly when the node last answered."""
    stored_at = (latest or {}).get("stored_at")
    if not stored_at or (uuid and uuid not in latest.get("gpus", {})):
        return recorded
    moment = datetime.fromtimestamp(stored_at, tz=UTC)
    return moment if recorded is None or moment > recorded else recorded


def card_reading(stored: dict[str, Any] | None) -> dict[str, Any]:
    """A card's latest reading as pages and the API show it: the live fields present."""
    return {f: stored[f] for f in LIVE_GPU_FIELDS if f in stored} if stored else {}


def _encoded(kept: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(kept)
    except orjson.JSONEncodeError:
        # A portal view is kept as it came, fields the schema does not check included: one
        # that JSON cannot carry (an integer past 64 bits from a caller's own dict) is
        # dropped with every other undeclared field, rather than failing the cycle.
        kept["gpus"] = {uuid: _portal_view(gpu) for uuid, gpu in kept["gpus"].items()}
        return orjson.dumps(kept)


def store_latest(snapshots: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Keep the newest snapshot of each node, reduced; returns what was stored."""
    now = time.time()
    reduced, encoded = {}, {}
    for node_id, snapshot in snapshots.items():
        reduced[node_id] = kept = reduce_snapshot(snapshot)
        kept["stored_at"] = now
        encoded[node_id] = _encoded(kept)
    if encoded:
        key = _latest_key()
        pipe = redis_client.client().pipeline(transaction=False)
        pipe.hset(key, mapping=encoded)
        pipe.expire(key, LATEST_TTL_S)
        pipe.execute()
    return reduced


# What the poll cycle of this process just stored, while that cycle's receivers run
# (services.record_poll_results): they ask for the same nodes' readings, and reading 3.5 MB
# back from Redis and decoding it was the largest part of the alerts' evaluation (#23).
_cycle_latest: dict[int, dict[str, Any]] | None = None


@contextlib.contextmanager
def cycle_readings(stored: dict[int, dict[str, Any]]) -> Iterator[None]:
    """``latest_for`` answers from ``stored`` (what ``store_latest`` returned) meanwhile."""
    global _cycle_latest
    previous, _cycle_latest = _cycle_latest, stored
    try:
        yield
    finally:
        _cycle_latest = previous


def latest_for(node_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    now = time.time()
    node_ids = list(node_ids)
    if not node_ids:
        return {}
    found = {}
    if (memo := _cycle_latest) is not None:
        # Stored a moment ago: fresh, and the same values Redis now holds for them.
        found = {n: memo[n] for n in node_ids if n in memo}
        node_ids = [n for n in node_ids if n not in found]
        if not node_ids:
            return found
    for node_id, value in zip(node_ids, redis_client.client().hmget(_latest_key(), node_ids),
                              strict=True):  # fmt: skip
        if value and _fresh(reading := orjson.loads(value), now):
            found[node_id] = reading
    return found


def _node_fields(node: dict[str, Any], latest: dict[str, Any] | None) -> dict[str, Any]:
    last_seen = seen_at(node["last_seen"], latest)
    return {
        "id": node["pk"],
        "name": node["name"],
        "state": node["state"],
        "last_seen": last_seen.isoformat() if last_seen else None,
        # Whether the last poll failed, not why: the text is the agent's (or the network's)
        # and goes only to node managers, apart from tiles (agent_errors below).
        "agent_error": bool(node["last_error"]),
    }


def agent_errors(rows: Iterable[dict[str, Any]]) -> dict[int, str]:
    """The error texts of the nodes (rows of _NODE_FIELDS) that have one, by node id."""
    return {row["pk"]: row["last_error"] for row in rows if row["last_error"]}


def summarize(node: dict[str, Any], latest: dict[str, Any] | None, gpu_count: int) -> dict:
    """One node as a fleet tile: its cards aggregated, never listed."""
    cards = (latest or {}).get("gpus", {}).values()
    util_sum, util_n, temp_max, used, total, power, lost = 0, 0, None, 0, 0, 0.0, 0
    models: dict[str, int] = {}
    vendors: dict[str, str] = {}  # {model: vendor} of the cards that are not NVIDIA's
    # Each card's utilization by its index, for the dashboard's heatmap: pairs, not a
    # dict, as JSON objects would need string keys.
    utils = []
    # One pass per node, no intermediate lists: this runs for every node every cycle.
    for card in cards:
        get = card.get
        utils.append((get("index"), util := get("utilization_gpu_pct")))
        if util is not None:
            util_sum += util
            util_n += 1
        if (temp := get("temperature_c")) is not None and (temp_max is None or temp > temp_max):
            temp_max = temp
        used += get("memory_used_mib") or 0
        total += get("memory_total_mib") or 0
        power += get("power_w") or 0
        lost += get("health") == "lost"
        model = get("name") or ""
        models[model] = models.get(model, 0) + 1
        if vendor := get("vendor"):  # absent on NVIDIA cards: only others are listed
            vendors[model] = vendor
    return {
        **_node_fields(node, latest),
        "collected_at": (latest or {}).get("collected_at"),
        "gpu_count": max(gpu_count, len(cards)),
        "gpus_lost": lost,
        "util_avg": round(util_sum / util_n, 1) if util_n else None,
        "memory_used_mib": used,
        "memory_total_mib": total,
        "temperature_max_c": temp_max,
        "power_w": round(power, 1),
        "models": models,
        "vendors": vendors,
        "cards_util": utils,
    }


def node_summaries(
    node_ids: Iterable[int] | None = None,
    latest: dict[int, dict[str, Any]] | None = None,
    rows: list[dict[str, Any]] | None = None,
) -> list[dict]:
    """Fleet tiles for the given nodes (all by default), as every member may see them.

    ``latest`` saves a cache read and ``rows`` (dicts of _NODE_FIELDS) a database read.
    """
    return node_summaries_and_errors(node_ids, latest, rows)[0]


def node_summaries_and_errors(
    node_ids: Iterable[int] | None = None,
    latest: dict[int, dict[str, Any]] | None = None,
    rows: list[dict[str, Any]] | None = None,
) -> tuple[list[dict], dict[int, str]]:
    """The tiles, and apart from them the error texts that only node managers see."""
    if rows is None:
        nodes = Node.objects.all()
        if node_ids is not None:
            nodes = nodes.filter(pk__any=list(node_ids))
        rows = [dict(zip(_NODE_FIELDS, r, strict=True)) for r in nodes.values_list(*_NODE_FIELDS)]
    rows = sorted(rows, key=itemgetter("name"))
    latest = dict(latest or {})
    missing = [r["pk"] for r in rows if r["pk"] not in latest]
    if missing:
        latest.update(latest_for(missing))
    counts = _gpu_counts([r["pk"] for r in rows] if node_ids is not None else None)
    tiles = [summarize(r, latest.get(r["pk"]), counts.get(r["pk"], 0)) for r in rows]
    return tiles, agent_errors(rows)


def _gpu_counts(node_ids: list[int] | None) -> dict[int, int]:
    gpus = GPU.objects.all()
    if node_ids is not None:
        gpus = gpus.filter(node_id__any=node_ids)
    return dict(gpus.values("node_id").annotate(n=Count("pk")).values_list("node_id", "n"))


def node_detail(node: Node, latest: dict[str, Any] | None = None) -> dict:
    """One node with all its cards (inventory joined to the latest readings)."""
    if latest is None:
        latest = latest_for([node.pk]).get(node.pk)
    readings = (latest or {}).get("gpus", {})
    gpus = node.gpus.order_by("index").values_list(
        "pk", "uuid", "index", "model", "vendor", "memory_total_mib", "health", "health_detail"
    )
    row = {f: getattr(node, f) for f in _NODE_FIELDS}
    return {
        **_node_fields(row, latest),
        "collected_at": (latest or {}).get("collected_at"),
        "gpus": [
            {
                **card_reading(readings.get(uuid)),
                "id": pk,
                "uuid": uuid,
                "index": index,
                "model": model,
                "vendor": vendor,
                "vendor_label": vendor_label(vendor),
                "memory_total_mib": memory,
                "health": health,
                "health_detail": detail,
            }
            for pk, uuid, index, model, vendor, memory, health, detail in gpus
        ],
    }
