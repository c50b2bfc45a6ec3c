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
    KUBERNETES = "kubernetes", _("Kubernetes cluster (read-only)")


# Sources the portal only reads: no agent URL, no token, no desired state sent.
READ_ONLY_SOURCES = frozenset({NodeSource.PROMETHEUS, NodeSource.KUBERNETES})


class GpuHealth(models.TextChoices):
    OK = "ok", _("Healthy")
    # A vendor tool's own word (npu-smi's Warning; Alarm, Critical ...): the card answers,
    # but is not ok; why is in GPU.health_detail. Only an ok card takes new slices.
    WARNING = "warning", _("Warning")
    UNHEALTHY = "unhealthy", _("Unhealthy")
    LOST = "lost", _("Lost")
    UNKNOWN = "unknown", _("Unknown")


class GpuVendor(models.TextChoices):
    """Who made the card, as the agent reports it (absent: NVIDIA, read through NVML)."""

    # Translated: Chinese readers know these makers by their Chinese names (华为昇腾 ...).
    NVIDIA = "nvidia", "NVIDIA"
    ASCEND = "ascend", _("Huawei Ascend")
    HYGON = "hygon", _("Hygon DCU")
    AMD = "amd", "AMD"
    METAX = "metax", _("MetaX")
    MOORETHREADS = "moorethreads", _("Moore Threads")
    CAMBRICON = "cambricon", _("Cambricon")


def vendor_label(vendor: str) -> str:
    """The vendor's name as pages show it; an unknown value as it is."""
    return str(dict(GpuVendor.choices).get(vendor, vendor))
