from django.db import models
from django.utils.translation import gettext_lazy as _

# A workload's reclaim_cause once reports' reclaim released its request (receivers).
TAKEN_BACK = "taken"

# The device classes of the two DRA drivers the portal writes quotas for.
HAMI_DEVICE_CLASS = "hami-core-gpu.project-hami.io"
NVIDIA_DEVICE_CLASS = "gpu.nvidia.com"


class Enforcement(models.TextChoices):
    """How the cluster itself holds pods to their GPU share."""

    HAMI = "hami", _("HAMi device plugin (nvidia.com/gpu, gpumem, gpucores)")
    DRA_HAMI = "dra-hami", _("DRA with HAMi's driver (hami-core-gpu.project-hami.io)")
    DRA_NVIDIA = "dra-nvidia", _("DRA with NVIDIA's driver (gpu.nvidia.com)")


DEVICE_CLASSES = {
    Enforcement.DRA_HAMI: HAMI_DEVICE_CLASS,
    Enforcement.DRA_NVIDIA: NVIDIA_DEVICE_CLASS,
}


class SyncOutcome(models.TextChoices):
    CREATED = "created", _("created")
    UPDATED = "updated", _("updated")
    REPAIRED = "repaired", _("drift repaired")
    UNCHANGED = "unchanged", _("in step")
    DELETED = "deleted", _("deleted: no longer wanted")


# The audit log's actions this app records, as a person reads them (audit.name_actions).
AUDIT_ACTIONS = {
    "cluster.registered": _("Cluster registered"),
    "cluster.namespace_mapped": _("Namespace mapped to a tenant"),
    "cluster.drift_repaired": _("Cluster quota objects put back in step"),
    "cluster.requester_made": _("Namespace's requester account made"),
    "cluster.job_created": _("Kubernetes Job made for a user"),
    "cluster.updated": _("Cluster changed"),
    "cluster.deleted": _("Cluster deleted"),
    "cluster.namespace_unmapped": _("Namespace mapping removed"),
}
