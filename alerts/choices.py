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
