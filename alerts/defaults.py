"""The rules a new portal starts with (the data migration writes them once; an admin may
change or disable each). Plain data, so the migration does not depend on the models."""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext
from django.utils.translation import gettext_noop as _  # marked here, translated on display

HOUR = 3600

# key, name, condition, comparison, threshold, for_seconds, severity, renotify_seconds
DEFAULT_RULES: tuple[dict[str, Any], ...] = (
    {"key": "gpu-temperature", "name": _("GPU temperature above 85 °C for 5 minutes"),
     "condition": "temperature_c", "comparison": "gt", "threshold": 85, "for_seconds": 300,
     "severity": "critical"},
    # xgettext:no-python-format
    {"key": "gpu-memory-full", "name": _("GPU memory above 95 % for 1 minute"),
     "condition": "memory_used_pct", "comparison": "gt", "threshold": 95, "for_seconds": 60,
     "severity": "warning"},
    # xgettext:no-python-format
    {"key": "allocation-idle", "name": _("Allocated GPU below 5 % utilization for 2 hours"),
     "condition": "allocation_utilization_pct", "comparison": "lt", "threshold": 5,
     "for_seconds": 2 * HOUR, "severity": "info", "renotify_seconds": 24 * HOUR},
    {"key": "gpu-xid", "name": _("GPU XID error"), "condition": "xid", "severity": "critical"},
    {"key": "gpu-ecc-uncorrectable", "name": _("Uncorrectable ECC errors"),
     "condition": "ecc_uncorrectable", "severity": "critical"},
    {"key": "gpu-lost", "name": _("GPU lost"), "condition": "gpu_lost", "severity": "critical"},
    {"key": "node-offline", "name": _("Node offline for 1 minute"), "condition": "node_offline",
     "for_seconds": 60, "severity": "critical"},
    {"key": "process-unallocated", "name": _("GPU process without an allocation"),
     "condition": "process_unallocated", "for_seconds": 60, "severity": "warning"},
    {"key": "process-over-slice", "name": _("GPU process over its slice"),
     "condition": "process_over_slice", "severity": "warning"},
    {"key": "process-unlimited", "name": _("GPU process without its slice's memory limit"),
     "condition": "process_unlimited", "for_seconds": 60, "severity": "warning"},
    {"key": "request-pending", "name": _("GPU request pending for more than 4 hours"),
     "condition": "request_pending", "comparison": "gt", "threshold": 4, "severity": "warning",
     "renotify_seconds": 24 * HOUR},
    # xgettext:no-python-format
    {"key": "quota-used", "name": _("Quota more than 90 % used"), "condition": "quota_used_pct",
     "comparison": "gt", "threshold": 90, "severity": "warning", "renotify_seconds": 24 * HOUR},
    {"key": "allocation-expiring", "name": _("Allocation expiring within 1 hour"),
     "condition": "allocation_expiring", "comparison": "lt", "threshold": 1, "severity": "info",
     "renotify_seconds": 0},
    {"key": "reclaim-warning", "name": _("Borrowed GPUs to be taken back"),
     "condition": "reclaim_warning", "severity": "warning", "renotify_seconds": 0},
    {"key": "alertmanager", "name": _("Prometheus Alertmanager"), "condition": "alertmanager",
     "severity": "warning"},
    {"key": "request-notices", "name": _("GPU request notices"), "condition": "request_notice",
     "severity": "info", "renotify_seconds": 0},
    {"key": "reclaim-notices", "name": _("Reclaim notices"), "condition": "reclaim_notice",
     "severity": "info", "renotify_seconds": 0},
    {"key": "idle-digest", "name": _("Daily idle GPU digest"), "condition": "idle_digest",
     "severity": "info", "renotify_seconds": 0},
)  # fmt: skip

# What each default rule is for, shown under its name (translated like the name).
DEFAULT_DESCRIPTIONS = {
    "gpu-temperature": _("A card running this hot throttles and may fail; check its cooling."),
    "gpu-memory-full": _("A card whose memory is nearly full makes new work fail to start."),
    "allocation-idle": _("An allocation holds a card without using it; release it for others."),
    "gpu-xid": _("The driver reported an XID error on the card."),
    "gpu-ecc-uncorrectable": _("The card's memory has uncorrectable errors; drain and replace it."),
    "gpu-lost": _("The card has fallen off the bus."),
    "node-offline": _("The node's agent does not answer."),
    "process-unallocated": _("A process uses a card without holding an allocation on it."),
    "process-over-slice": _("A process uses more memory than its slice allows."),
    "process-unlimited": _(
        "A process was started without the memory limit of its slice's "
        "launch settings: nothing stops it taking more than its share."
    ),
    "request-pending": _("A GPU request waits for a decision."),
    "quota-used": _("A tenant has nearly used up a quota."),
    "allocation-expiring": _("An allocation ends soon; extend it or save your work."),
    "reclaim-warning": _("An idle allocation is to be taken back after its grace period."),
    "alertmanager": _("Alerts from an existing Prometheus Alertmanager."),
    "request-notices": _("Each step of your GPU requests."),
    "reclaim-notices": _("Reclaim warnings, reclaims and appeal decisions of your allocations."),
    "idle-digest": _("Every morning: the idle allocations and the GPU-hours they waste."),
}
_DEFAULT_NAMES = {rule["key"]: rule["name"] for rule in DEFAULT_RULES}

# The rules the portal itself raises or routes through; their key and condition are fixed.
ALERTMANAGER_RULE = "alertmanager"
REQUEST_NOTICE_RULE = "request-notices"
RECLAIM_WARNING_RULE = "reclaim-warning"
RECLAIM_NOTICE_RULE = "reclaim-notices"
IDLE_DIGEST_RULE = "idle-digest"


def rule_label(key: str, name: str) -> str:
    """A rule's name in the reader's language: a default rule's name, as long as nobody
    renamed it, is translated by its key; a name an admin typed is shown as typed."""
    default = _DEFAULT_NAMES.get(key)
    return gettext(default) if default is not None and name == default else name


def rule_description(key: str, description: str) -> str:
    """A rule's description in the reader's language, by the same rule as its name; a
    default rule without one gets its default description."""
    default = DEFAULT_DESCRIPTIONS.get(key)
    if default is not None and description in ("", default):
        return gettext(default)
    return description
