from django.db import models
from django.utils.translation import gettext_lazy as _


class ChannelKind(models.TextChoices):
    EMAIL = "email", _("Email")
    DINGTALK = "dingtalk", _("DingTalk robot")
    WECOM = "wecom", _("WeCom robot")
    FEISHU = "feishu", _("Feishu / Lark robot")
    SLACK = "slack", _("Slack incoming webhook")
    WEBHOOK = "webhook", _("Webhook (JSON, signed)")


class Severity(models.TextChoices):
    INFO = "info", _("Info")
    WARNING = "warning", _("Warning")
    CRITICAL = "critical", _("Critical")


class EventState(models.TextChoices):
    FIRING = "firing", _("Firing")
    ACKNOWLEDGED = "acknowledged", _("Acknowledged")
    RESOLVED = "resolved", _("Resolved")


OPEN_EVENT_STATES = (EventState.FIRING, EventState.ACKNOWLEDGED)


class DeliveryStatus(models.TextChoices):
    # Waiting for its (next) attempt; the row, not the Celery message, is the truth.
    PENDING = "pending", _("Pending")
    DELIVERED = "delivered", _("Delivered")
    # Gave up: a permanent error, or transient ones past the retry horizon.
    FAILED = "failed", _("Failed")
    # Its channel was disabled or deleted before it could be sent.
    CANCELLED = "cancelled", _("Cancelled")


class RuleKind(models.TextChoices):
    # Compared with each card's latest reading every poll cycle.
    METRIC = "metric", _("Metric")
    # Something a card, a node or a process did, read from the same cycle.
    EVENT = "event", _("Event")
    # Requests, quotas and allocations, checked by a beat task.
    BUSINESS = "business", _("Business state")
    # Not evaluated here: Alertmanager's alerts and GPU request notices.
    EXTERNAL = "external", _("External")


class Condition(models.TextChoices):
    """What a rule watches; each belongs to one kind (CONDITION_KIND)."""

    TEMPERATURE = "temperature_c", _("GPU temperature (°C)")
    MEMORY_USED = "memory_used_pct", _("GPU memory used (%)")
    UTILIZATION = "utilization_gpu_pct", _("GPU utilization (%)")
    POWER = "power_pct", _("Power draw (percent of the limit)")
    ALLOCATION_UTILIZATION = (
        "allocation_utilization_pct",
        _("Utilization of an allocated card over the window (%)"),
    )
    XID = "xid", _("XID error")
    ECC_UNCORRECTABLE = "ecc_uncorrectable", _("Uncorrectable ECC errors")
    GPU_LOST = "gpu_lost", _("GPU lost (fallen off the bus)")
    NODE_OFFLINE = "node_offline", _("Node offline")
    PROCESS_UNALLOCATED = "process_unallocated", _("Process without an allocation")
    PROCESS_OVER_SLICE = "process_over_slice", _("Process over its slice")
    PROCESS_UNLIMITED = "process_unlimited", _("Process without its slice's memory limit")
    REQUEST_PENDING = "request_pending", _("Request pending (hours)")
    QUOTA_USED = "quota_used_pct", _("Quota used (%)")
    ALLOCATION_EXPIRING = "allocation_expiring", _("Allocation expiring within (hours)")
    RECLAIM_WARNING = "reclaim_warning", _("Borrowed capacity to be taken back")
    ALERTMANAGER = "alertmanager", _("Prometheus Alertmanager alert")
    REQUEST_NOTICE = "request_notice", _("GPU request notice")
    RECLAIM_NOTICE = "reclaim_notice", _("Reclaim notice")
    IDLE_DIGEST = "idle_digest", _("Daily idle GPU digest")


CONDITION_KIND = {
    **dict.fromkeys(
        (Condition.TEMPERATURE, Condition.MEMORY_USED, Condition.UTILIZATION, Condition.POWER,
         Condition.ALLOCATION_UTILIZATION), RuleKind.METRIC),
    **dict.fromkeys(
        (Condition.XID, Condition.ECC_UNCORRECTABLE, Condition.GPU_LOST, Condition.NODE_OFFLINE,
         Condition.PROCESS_UNALLOCATED, Condition.PROCESS_OVER_SLICE,
         Condition.PROCESS_UNLIMITED), RuleKind.EVENT),
    **dict.fromkeys(
        (Condition.REQUEST_PENDING, Condition.QUOTA_USED, Condition.ALLOCATION_EXPIRING,
         Condition.RECLAIM_WARNING), RuleKind.BUSINESS),
    **dict.fromkeys((Condition.ALERTMANAGER, Condition.REQUEST_NOTICE, Condition.RECLAIM_NOTICE,
                     Condition.IDLE_DIGEST), RuleKind.EXTERNAL),
}  # fmt: skip
# Conditions compared with a threshold (the others are true or false by themselves).
THRESHOLD_CONDITIONS = frozenset({
    Condition.TEMPERATURE, Condition.MEMORY_USED, Condition.UTILIZATION, Condition.POWER,
    Condition.ALLOCATION_UTILIZATION, Condition.REQUEST_PENDING, Condition.QUOTA_USED,
    Condition.ALLOCATION_EXPIRING,
})  # fmt: skip


class Comparison(models.TextChoices):
    ABOVE = "gt", _("above")
    BELOW = "lt", _("below")


class ScopeKind(models.TextChoices):
    ALL = "all", _("Everything")
    POOL = "pool", _("A pool")
    NODE = "node", _("A node")
    TENANT = "tenant", _("A tenant")


# What a subscription's scope_name holds for each kind: the field the events' labels carry
# (alerts.recipients.scope_matches).
SCOPE_NAME_FIELD = {ScopeKind.POOL: "slug", ScopeKind.NODE: "name", ScopeKind.TENANT: "slug"}

SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


class NoticeTopic(models.TextChoices):
    """What a notice delivery (no event) is about; none: a GPU request notice."""

    RECLAIM = "reclaim", _("Reclaim notice")
    DIGEST = "digest", _("Daily idle GPU digest")
