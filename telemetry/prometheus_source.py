"""Nodes seen only through Prometheus: clusters that run NVIDIA's dcgm-exporter, not our agent.

One instant query reads the ``DCGM_FI_*`` series the portal needs; a pure function
turns the answer into per-host snapshots in exactly the agent's shape
(``agents/gpu_agent/model.py``), so ``services.record_poll_results`` records them
like any agent poll: inventory, node health, latest readings and the live push.

Both name sets are read: the legacy names (%, MiB, MHz, W, mJ) and the DCGM 4.7
base-unit names that dcgm-exporter 4.9 exports (0-1 ratios, bytes, Hz, J). See
``docs/prometheus.md`` for the names, the conversions and what is left out.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests
from django.conf import settings
from django.db import IntegrityError, transaction
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from agents.choices import NodeSource
from agents.gpu_agent import schema
from agents.models import GPU, Node
from telemetry import poller, services

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
AGENT_INFO = {"version": "", "backend": "prometheus"}
# Appended to a Prometheus host's node name when an agent node already has that name.
NAME_SUFFIX = "@prometheus"

# Memory fields add up over a card's MIG instances; every other field is a card-level value
# that dcgm-exporter repeats on each instance's series, so those take the largest copy.
_ADDITIVE = frozenset({"memory_used_mib", "_memory_free_mib", "_memory_reserved_mib"})


@dataclass(frozen=True, slots=True)
class Source:
    """Where one snapshot field comes from: a series name and how to reach the field's unit."""

    field: str
    scale: float
    # Lower wins when a card exports both name sets (during an upgrade, or two exporters).
    rank: int


# The fields read from dcgm-exporter: the reading schema's that name series, and two that
# only serve to reckon a card's total memory (used + free + reserved).
_READ = [f for f in schema.GPU_FIELDS if f.dcgm]
_TOTAL_MEMORY_PARTS = (
    schema.Field("_memory_free_mib", "number", dcgm=(
        schema.Dcgm("DCGM_FI_DEV_FB_FREE_BYTES", 1 / MIB), schema.Dcgm("DCGM_FI_DEV_FB_FREE"))),
    schema.Field("_memory_reserved_mib", "number", dcgm=(
        schema.Dcgm("DCGM_FI_DEV_FB_RESERVED_BYTES", 1 / MIB),
        schema.Dcgm("DCGM_FI_DEV_FB_RESERVED"))),
)  # fmt: skip
# Series name -> the snapshot field it fills. The 4.9 names rank first: they carry more
# precision (bytes, Hz) than the legacy ones they replace.
SOURCES: dict[str, Source] = {
    dcgm.series: Source(read.name, dcgm.scale, rank)
    for read in (*_READ, *_TOTAL_MEMORY_PARTS)
    for rank, dcgm in enumerate(read.dcgm)
}

HOSTNAME_LABELS = ("Hostname", "hostname")  # before 4.6 / from 4.6 on
DRIVER_LABELS = ("DCGM_FI_SYSTEM_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION")  # 4.9 / before
MIG_LABEL = "GPU_I_ID"

# One instant query for every name above. ``max by`` keeps one series per card, MIG
# instance, host and name: copies scraped by several exporter instances (different
# ``instance``/``job``/pod labels) collapse in Prometheus, and the answer carries only
# the labels used here, about a third of the bytes of the raw series.
_KEEP_LABELS = ("__name__", "UUID", MIG_LABEL, "gpu", "modelName", "pci_bus_id")
QUERY = 'max by ({labels}) ({{__name__=~"{names}"}})'.format(
    labels=", ".join(_KEEP_LABELS + HOSTNAME_LABELS + DRIVER_LABELS),
    names="|".join(sorted(SOURCES)),
)


def _number(raw: Any) -> float | None:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    # NaN and Inf are how exporters say "no reading"; absent, never zero.
    return value if math.isfinite(value) else None


@dataclass
class _Card:
    uuid: str
    hostname: str
    last_ts: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    # field -> MIG instance ("" for the whole card) -> (rank, timestamp, value in the field's unit)
    values: dict[str, dict[str, tuple[int, float, float]]] = field(default_factory=dict)

    def put(self, source: Source, instance: str, ts: float, value: float) -> None:
        per_instance = self.values.setdefault(source.field, {})
        seen = per_instance.get(instance)
        # Same card, field and instance twice (a duplicate scrape): keep one, never add them.
        if seen is None or (source.rank, -ts) < (seen[0], -seen[1]):
            per_instance[instance] = (source.rank, ts, value * source.scale)

    def reading(self, name: str) -> float | None:
        per_instance = self.values.get(name)
        if not per_instance:
            return None
        if "" in per_instance:  # a whole-card series beats adding up its MIG instances
            return per_instance[""][2]
        values = [v for _, _, v in per_instance.values()]
        return sum(values) if name in _ADDITIVE else max(values)

    def to_gpu(self, fallback_index: int) -> dict[str, Any]:
        index = self.labels.get("gpu", "")
        gpu: dict[str, Any] = {
            # ASCII digits only: "²" is a digit to str.isdigit, and no number to int().
            "index": int(index) if index.isascii() and index.isdigit() else fallback_index,
            "uuid": self.uuid,
        }
        if self.labels.get("modelName"):
            gpu["name"] = self.labels["modelName"]
        if self.labels.get("pci_bus_id"):
            gpu["pci_bus_id"] = self.labels["pci_bus_id"]
        used = self.reading("memory_used_mib")
        free = self.reading("_memory_free_mib")
        reserved = self.reading("_memory_reserved_mib")
        # A finite series scaled (or added up) can still overflow to infinity, which has no
        # integer to round to: such a field is left out, as a series without a value is.
        if (
            used is not None
            and free is not None
            and math.isfinite(total := used + free + (reserved or 0.0))
        ):
            gpu["memory_total_mib"] = round(total)
        for read in _READ:
            if (value := self.reading(read.name)) is not None and math.isfinite(value):
                # To the field's type: base-unit series scaled back (bytes to MiB, ratios
                # to %, Hz to MHz) round half to even to the nearest unit.
                gpu[read.name] = round(value) if read.type == "int" else round(value, 3)
        gpu["health"] = "ok"
        return gpu


def snapshots_from_series(series: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Prometheus instant-query results -> {hostname: snapshot in the agent's shape}.

    Series without a UUID or a host label, of names not in ``SOURCES``, or without a
    finite value are ignored. A card (UUID) belongs to one host: if two host labels name
    it, the one with the newer sample wins, so it is never counted twice.
    """
    cards: dict[tuple[str, str], _Card] = {}
    drivers: dict[str, str] = {}
    for item in series:
        labels = item.get("metric") or {}
        source = SOURCES.get(labels.get("__name__", ""))
        uuid = labels.get("UUID")
        hostname = next((labels[k] for k in HOSTNAME_LABELS if labels.get(k)), "")
        sample = item.get("value") or (None, None)
        value = _number(sample[1]) if len(sample) == 2 else None
        if source is None or not uuid or not hostname or value is None:
            continue
        ts = _number(sample[0]) or 0.0
        card = cards.get((uuid, hostname))
        if card is None:
            card = cards[(uuid, hostname)] = _Card(uuid, hostname)
        if ts >= card.last_ts:
            card.last_ts = ts
            card.labels = labels
        card.put(source, labels.get(MIG_LABEL, ""), ts, value)
        driver = next((labels[k] for k in DRIVER_LABELS if labels.get(k)), "")
        if driver:
            drivers[hostname] = driver

    owner: dict[str, _Card] = {}
    for card in cards.values():
        best = owner.get(card.uuid)
        if best is None or (card.last_ts, best.hostname) > (best.last_ts, card.hostname):
            owner[card.uuid] = card

    by_host: dict[str, list[_Card]] = {}
    for card in owner.values():
        by_host.setdefault(card.hostname, []).append(card)
    snapshots: dict[str, dict[str, Any]] = {}
    for hostname, host_cards in sorted(by_host.items()):
        host_cards.sort(key=lambda c: (c.labels.get("gpu", ""), c.uuid))
        snapshot: dict[str, Any] = {"agent": dict(AGENT_INFO), "hostname": hostname}
        if hostname in drivers:
            snapshot["driver_version"] = drivers[hostname]
        snapshot["collected_at"] = max(c.last_ts for c in host_cards)
        gpus = [card.to_gpu(i) for i, card in enumerate(host_cards)]
        snapshot["gpus"] = sorted(gpus, key=lambda g: (g["index"], g["uuid"]))
        snapshots[hostname] = snapshot
    return snapshots


_HOSTNAME = next(f for f in schema.NODE_FIELDS if f.name == "hostname")


def _checked(
    snapshots: dict[str, dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The hosts' snapshots the reading schema accepts, and why each other one is refused.

    Checked before any query names their UUIDs or host names (PostgreSQL refuses a NUL in
    a parameter); a host whose very name is unfit gets no node, only a line in the log.
    """
    cap = settings.GPU_MAX_CARDS_PER_NODE
    kept, refused = {}, {}
    for hostname, snapshot in snapshots.items():
        try:
            kept[hostname] = schema.check_snapshot(snapshot, cap)
        except schema.SnapshotError as exc:
            if _HOSTNAME.check(hostname) is None:
                refused[hostname] = str(exc)
            else:
                logger.warning("prometheus: ignored a host with an unfit name: %r", hostname[:100])
    return kept, refused


class PrometheusUnavailable(RuntimeError):
    """Prometheus did not answer the query, or answered with something unusable."""


def fetch_series(url: str, *, timeout: float) -> list[dict[str, Any]]:
    """Run the one query; raises ``PrometheusUnavailable`` on any failure to get an answer."""
    try:
        # No retries: the next poll is the retry, and a node goes offline only after several
        # misses. Retries with back-off would stretch one cycle far past ``timeout``.
        client = PrometheusConnect(url=url, timeout=timeout, retry=Retry(total=0))
        result = client.custom_query(QUERY)
    except (requests.RequestException, PrometheusApiClientException, ValueError, KeyError) as exc:
        raise PrometheusUnavailable(str(exc) or type(exc).__name__) from exc
    if not isinstance(result, list):
        raise PrometheusUnavailable(f"unexpected answer: {type(result).__name__}")
    return result


def _agent_owned_uuids(snapshots: Mapping[str, dict[str, Any]]) -> set[str]:
    uuids = [g["uuid"] for s in snapshots.values() for g in s["gpus"]]
    return set(
        GPU.objects.filter(uuid__in=uuids, node__source=NodeSource.AGENT).values_list(
            "uuid", flat=True
        )
    )


def without_agent_cards(
    snapshots: dict[str, dict[str, Any]], agent_uuids: set[str]
) -> dict[str, dict[str, Any]]:
    """Drop cards our own agents already report (Prometheus often scrapes them too).

    The agent is the richer source; letting both report a card would move it between
    two nodes on every poll. A host left with no card is not a Prometheus node.
    """
    kept = {}
    for hostname, snapshot in snapshots.items():
        gpus = [g for g in snapshot["gpus"] if g["uuid"] not in agent_uuids]
        if gpus:
            kept[hostname] = {**snapshot, "gpus": gpus}
    return kept


def _free_name(hostname: str, taken: set[str]) -> str:
    base = hostname[:255]
    if base not in taken:
        return base
    candidate = f"{hostname[: 255 - len(NAME_SUFFIX)]}{NAME_SUFFIX}"
    n = 2
    while candidate in taken:
        tail = f"{NAME_SUFFIX}-{n}"
        candidate = f"{hostname[: 255 - len(tail)]}{tail}"
        n += 1
    return candidate


def ensure_nodes(hostnames: Iterable[str]) -> dict[str, int]:
    """The Prometheus node of each hostname, created on first sight: {hostname: node id}."""
    hostnames = sorted(set(hostnames))
    nodes = Node.objects.filter(source=NodeSource.PROMETHEUS)
    known = dict(nodes.filter(hostname__in=hostnames).values_list("hostname", "pk"))
    missing = [h for h in hostnames if h not in known]
    if missing:
        taken = set(
            Node.objects.filter(
                name__in=missing + [f"{h}{NAME_SUFFIX}" for h in missing]
            ).values_list("name", flat=True)
        )
        for hostname in missing:
            name = _free_name(hostname, taken)
            taken.add(name)
            try:
                with transaction.atomic():
                    node = Node.objects.create(
                        name=name, hostname=hostname, source=NodeSource.PROMETHEUS
                    )
            except IntegrityError:
                # Another poll, or an admin, took the name since we looked: next cycle retries.
                logger.warning("prometheus: could not create a node for %s", hostname)
                continue
            known[hostname] = node.pk
            logger.info("prometheus: new read-only node %s (host %s)", name, hostname)
    return known


def poll_prometheus() -> services.PollSummary:
    """One cycle: read Prometheus, record every host it knows, and fail those it lost."""
    url = settings.PROMETHEUS_URL
    if not url:
        return services.PollSummary()
    started = time.perf_counter()
    prometheus_nodes = dict(
        Node.objects.filter(source=NodeSource.PROMETHEUS).values_list("pk", "hostname")
    )
    try:
        series = fetch_series(url, timeout=settings.PROMETHEUS_TIMEOUT)
    except PrometheusUnavailable as exc:
        error = f"Prometheus at {url} unavailable: {exc}"
        logger.warning("prometheus: %s", error)
        duration = time.perf_counter() - started
        return services.record_poll_results(
            [poller.PollResult(pk, None, error[:1000], duration) for pk in prometheus_nodes]
        )
    snapshots, refused = _checked(snapshots_from_series(series))
    snapshots = without_agent_cards(snapshots, _agent_owned_uuids(snapshots))
    node_ids = ensure_nodes([*snapshots, *refused])
    duration = time.perf_counter() - started
    results = [
        poller.PollResult(node_ids[hostname], snapshot, "", duration, checked=True)
        for hostname, snapshot in snapshots.items()
        if hostname in node_ids
    ]
    results += [
        poller.PollResult(node_ids[hostname], None, error, duration)
        for hostname, error in refused.items()
        if hostname in node_ids
    ]
    answered = {r.node_id for r in results}
    results += [
        poller.PollResult(pk, None, f"host {hostname!r} has no DCGM series in Prometheus", 0.0)
        for pk, hostname in prometheus_nodes.items()
        if pk not in answered
    ]
    return services.record_poll_results(results)
