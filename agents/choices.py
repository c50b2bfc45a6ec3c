from django.db import models
from django.utils.translation import gettext_lazy as _


class NodeState(models.TextChoices):
    ONLINE = "online", _("Online")
    OFFLINE = "offline", _("Offline")
    DRAINING = "draining", _("Draining")
    MAINTENANCE = "maintenance", _("Maintenance")


# States an admin sets by hand; polling never overrides them.
ADMIN_STATES = frozenset({NodeState.DRAINING, NodeState.MAINTENANCE})


class NodeSource(models.TextChoices):
    AGENT = "agent", _("GPU Portal agent")
    PROMETHEUS = "prometheus", _("Prometheus (read-only)")


class GpuHealth(models.TextChoices):
    OK = "ok", _("Healthy")
    LOST = "lost", _("Lost")
    UNKNOWN = "unknown", _("Unknown")
