"""The rules a new portal starts with (the data migration writes them once; an admin may
change or disable each). Plain data, so the migration does not depend on the models."""

from __future__ import annotations

from typing import Any

HOUR = 3600

# key, name, condition, comparison, threshold, for_seconds, severity, renotify_seconds
DEFAULT_RULES: tuple[dict[str, Any], ...] = (
    {"key": "gpu-temperature", "name": "GPU temperature above 85 °C for 5 minutes",
     "condition": "temperature_c", "comparison": "gt", "threshold": 85, "for_seconds": 300,
     "severity": "critical"},
    {"key": "gpu-memory-full", "name": "GPU memory above 95 % for 1 minute",
     "condition": "memory_used_pct", "comparison": "gt", "threshold": 95, "for_seconds": 60,
     "severity": "warning"},
    {"key": "allocation-idle", "name": "Allocated GPU below 5 % utilization for 2 hours",
     "condition": "allocation_utilization_pct", "comparison": "lt", "threshold": 5,
     "for_seconds": 2 * HOUR, "severity": "info", "renotify_seconds": 24 * HOUR},
    {"key": "gpu-xid", "name": "GPU XID error", "condition": "xid", "severity": "critical"},
    {"key": "gpu-ecc-uncorrectable", "name": "Uncorrectable ECC errors",
     "condition": "ecc_uncorrectable", "severity": "critical"},
    {"key": "gpu-lost", "name": "GPU lost", "condition": "gpu_lost", "severity": "critical"},
    {"key": "node-offline", "name": "Node offline for 1 minute", "condition": "node_offline",
     "for_seconds": 60, "severity": "critical"},
    {"key": "process-unallocated", "name": "GPU process without an allocation",
     "condition": "process_unallocated", "for_seconds": 60, "severity": "warning"},
    {"key": "process-over-slice", "name": "GPU process over its slice",
     "condition": "process_over_slice", "severity": "warning"},
    {"key": "request-pending", "name": "GPU request pending for more than 4 hours",
     "condition": "request_pending", "comparison": "gt", "threshold": 4, "severity": "warning",
     "renotify_seconds": 24 * HOUR},
    {"key": "quota-used", "name": "Quota more than 90 % used", "condition": "quota_used_pct",
     "comparison": "gt", "threshold": 90, "severity": "warning", "renotify_seconds": 24 * HOUR},
    {"key": "allocation-expiring", "name": "Allocation expiring within 1 hour",
     "condition": "allocation_expiring", "comparison": "lt", "threshold": 1, "severity": "info",
     "renotify_seconds": 0},
    {"key": "reclaim-warning", "name": "Borrowed GPUs to be taken back",
     "condition": "reclaim_warning", "severity": "warning", "renotify_seconds": 0},
    {"key": "alertmanager", "name": "Prometheus Alertmanager", "condition": "alertmanager",
     "severity": "warning"},
    {"key": "request-notices", "name": "GPU request notices", "condition": "request_notice",
     "severity": "info", "renotify_seconds": 0},
)  # fmt: skip

# The rules the portal itself raises or routes through; their key and condition are fixed.
ALERTMANAGER_RULE = "alertmanager"
REQUEST_NOTICE_RULE = "request-notices"
