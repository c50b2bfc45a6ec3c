"""Pools' gauges and counters for the portal's /metrics (registered in PoolsConfig.ready)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pools import reconcile
from pools.models import Allocation, PoolCard


class PoolsCollector:
    def collect(self) -> Iterator[Metric]:
        drift = CounterMetricFamily(
            "gpuportal_reconcile_drift",
            "Drift found by reconciliation, by kind (each repaired when found).",
            labels=["kind"],
        )
        for kind, count in sorted(reconcile.counted().items()):
            drift.add_metric([kind], count)
        yield drift
        allocations = GaugeMetricFamily(
            "gpuportal_allocations", "vGPU allocations by state and agent sync.",
            labels=["state", "agent_sync"],
        )  # fmt: skip
        rows = (
            Allocation.objects.order_by()
            .values("state", "agent_sync")
            .annotate(n=Count("pk"))
            .values_list("state", "agent_sync", "n")
        )
        for state, sync, n in sorted(rows):
            allocations.add_metric([state, sync], n)
        yield allocations
        cordoned = GaugeMetricFamily("gpuportal_pool_cards_cordoned", "Cordoned pool cards.")
        cordoned.add_metric([], PoolCard.objects.exclude(cordoned_at=None).count())
        yield cordoned
