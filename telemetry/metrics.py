"""Fleet gauges for the portal's /metrics: nodes, cards, their use, and the poller's health."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Iterator

from django.conf import settings
from django.core.cache import cache
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agents.models import GPU, Node
from telemetry import readings

_POLL_STATS = "metrics:poll"


def record_poll(duration_s: float, polled: int, failed: int) -> None:
    """Called after each poll chunk; kept in the cache so any web process can report it."""
    stats = cache.get(_POLL_STATS) or {"polls": 0, "failures": 0, "chunks": 0}
    stats["polls"] += polled
    stats["failures"] += failed
    stats["chunks"] += 1
    stats["last_duration_s"] = duration_s
    stats["last_at"] = time.time()
    # Last writer wins when chunks finish together: the totals are approximate there,
    # never the cycle's health (last duration, last time).
    cache.set(_POLL_STATS, stats, timeout=None)


def last_poll_at() -> float | None:
    """When a poll chunk last finished (seconds since the epoch), from any process."""
    stats = cache.get(_POLL_STATS) or {}
    return stats.get("last_at")


class FleetCollector:
    def collect(self) -> Iterator[Metric]:
        nodes = Counter(Node.objects.values_list("state", "source"))
        family = GaugeMetricFamily(
            "gpuportal_nodes", "Nodes by state and source.", labels=["state", "source"]
        )
        for (state, source), count in sorted(nodes.items()):
            family.add_metric([state, source], count)
        yield family

        gpus = list(GPU.objects.values_list("pk", "uuid", "node_id", "model", "health"))
        by_model = Counter((model, health) for _, _, _, model, health in gpus)
        family = GaugeMetricFamily(
            "gpuportal_gpus", "GPUs by model and health.", labels=["model", "health"]
        )
        for (model, health), count in sorted(by_model.items()):
            family.add_metric([model, health], count)
        yield family
        yield from self._usage(gpus)
        yield from self._poller()

    def _usage(self, gpus: list[tuple]) -> Iterator[Metric]:
        keys = settings.METRICS_NODE_LABELS
        node_labels = {
            pk: [str((labels or {}).get(k, "")) for k in keys]
            for pk, labels in Node.objects.values_list("pk", "labels")
        }
        latest = readings.latest_for(node_labels)
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for _, uuid, node_id, model, _ in gpus:
            reading = latest.get(node_id, {}).get("gpus", {}).get(uuid)
            if reading is not None:
                groups[(model, *node_labels.get(node_id, [""] * len(keys)))].append(reading)
        names = ["model", *keys]
        util = GaugeMetricFamily(
            "gpuportal_gpu_utilization_percent",
            "Average GPU utilization of the cards with a fresh reading.", labels=names,
        )  # fmt: skip
        used = GaugeMetricFamily(
            "gpuportal_gpu_memory_used_mib", "Framebuffer memory in use (MiB).", labels=names
        )
        total = GaugeMetricFamily(
            "gpuportal_gpu_memory_total_mib", "Framebuffer memory in all (MiB).", labels=names
        )
        reporting = GaugeMetricFamily(
            "gpuportal_gpus_reporting", "Cards with a fresh reading.", labels=names
        )
        for key, cards in sorted(groups.items()):
            values = [c["utilization_gpu_pct"] for c in cards if "utilization_gpu_pct" in c]
            if values:
                util.add_metric(list(key), sum(values) / len(values))
            used.add_metric(list(key), sum(c.get("memory_used_mib", 0) for c in cards))
            total.add_metric(list(key), sum(c.get("memory_total_mib", 0) for c in cards))
            reporting.add_metric(list(key), len(cards))
        yield from (util, used, total, reporting)

    def _poller(self) -> Iterator[Metric]:
        stats = cache.get(_POLL_STATS) or {}
        polls = CounterMetricFamily("gpuportal_agent_polls", "Agent polls attempted.")
        polls.add_metric([], stats.get("polls", 0))
        failures = CounterMetricFamily("gpuportal_agent_poll_failures", "Agent polls that failed.")
        failures.add_metric([], stats.get("failures", 0))
        yield polls
        yield failures
        if "last_duration_s" in stats:
            duration = GaugeMetricFamily(
                "gpuportal_poll_chunk_duration_seconds",
                "Wall time of the last poll chunk (fetch, parse, record, push).",
            )
            duration.add_metric([], stats["last_duration_s"])
            yield duration
            last = GaugeMetricFamily(
                "gpuportal_poll_last_timestamp_seconds", "When the last poll chunk finished."
            )
            last.add_metric([], stats["last_at"])
            yield last
