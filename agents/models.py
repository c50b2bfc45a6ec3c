from __future__ import annotations

from django.db import connections, models, transaction
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from agents.choices import GpuHealth, GpuVendor, NodeSource, NodeState
from agents.validators import AGENT_URL_MAX_LENGTH, validate_agent_url
from portal import crypto

# Deleting nodes or cards and writing rows that point at them (a poll cycle adds cards, a
# flush adds rollups) take this PostgreSQL advisory lock, exclusive and shared: otherwise a
# cycle can add a card to a node deleted meanwhile, and one of the two transactions fails
# on the foreign key at commit (a 500 for the admin, or a whole cycle lost).
INVENTORY_LOCK = 0x6770_7500


def lock_inventory(*, exclusive: bool = False, using: str = "default") -> None:
    """Hold the inventory lock until this transaction ends. Shared holders run together; an
    exclusive one waits for them, and they for it."""
    function = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s)", [INVENTORY_LOCK])


class _DeletesWaitForCycles(models.QuerySet):
    """A queryset whose delete() waits for the poll cycles in flight (``lock_inventory``)."""

    def delete(self):
        with transaction.atomic(using=self.db):
            lock_inventory(exclusive=True, using=self.db)
            return super().delete()

    delete.alters_data = True
    delete.queryset_only = True


class _DeleteWaitsForCycles:
    """Model.delete() that, like the queryset's, takes the inventory lock before collecting
    what cascades: a card a cycle added meanwhile is then collected too."""

    def delete(self, using=None, keep_parents=False):
        using = using or "default"
        with transaction.atomic(using=using):
            lock_inventory(exclusive=True, using=using)
            return super().delete(using=using, keep_parents=keep_parents)


class Node(_DeleteWaitsForCycles, models.Model):
    """A GPU server. Its agent is polled; nothing is deleted when it goes away."""

    name = models.CharField(_("name"), max_length=255, unique=True)
    hostname = models.CharField(_("hostname"), max_length=255, blank=True)
    source = models.CharField(
        _("source"), max_length=16, choices=NodeSource, default=NodeSource.AGENT
    )
    # Not a URLField: agents on private networks have bare host names (gpu-node-01).
    agent_url = models.CharField(
        _("agent URL"), max_length=AGENT_URL_MAX_LENGTH, blank=True, validators=[validate_agent_url]
    )
    # The portal must present this token to the agent, so it cannot be hashed: it is kept
    # encrypted (portal.crypto) and only its hint (last characters) is ever shown.
    agent_token_encrypted = models.TextField(_("agent token (encrypted)"), blank=True)
    agent_token_hint = models.CharField(_("agent token hint"), max_length=8, blank=True)
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    state = models.CharField(
        _("state"), max_length=16, choices=NodeState, default=NodeState.OFFLINE
    )
    missed_polls = models.PositiveIntegerField(_("missed polls"), default=0)
    # An offline node is polled less often: not before this moment (services.poll_fleet).
    poll_after = models.DateTimeField(_("next poll after"), null=True, blank=True)
    last_seen = models.DateTimeField(_("last seen"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True)
    agent_version = models.CharField(_("agent version"), max_length=64, blank=True)
    driver_version = models.CharField(_("driver version"), max_length=64, blank=True)
    cuda_version = models.CharField(_("CUDA version"), max_length=32, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = _DeletesWaitForCycles.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = _("node")
        verbose_name_plural = _("nodes")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("admin:agents_node_change", args=[self.pk])

    @property
    def agent_token(self) -> str:
        """The token in clear, for the poller and the connection test only."""
        return crypto.decrypt(self.agent_token_encrypted) if self.agent_token_encrypted else ""

    @agent_token.setter
    def agent_token(self, token: str) -> None:
        # A property setter, so Node(agent_token=...) and objects.create(...) encrypt too.
        self.set_agent_token(token)

    def set_agent_token(self, token: str) -> None:
        self.agent_token_encrypted = crypto.encrypt(token) if token else ""
        self.agent_token_hint = token_hint(token)


def token_hint(token: str) -> str:
    """The last four characters, and only for tokens long enough that they give little away."""
    if not token:
        return ""
    return "…" + token[-4:] if len(token) >= 12 else "…"


class GPU(_DeleteWaitsForCycles, models.Model):
    """A physical card, identified by its UUID wherever it moves."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField(_("index"))
    uuid = models.CharField(_("UUID"), max_length=64, unique=True)
    model = models.CharField(_("model"), max_length=128)
    vendor = models.CharField(
        _("vendor"), max_length=32, choices=GpuVendor, default=GpuVendor.NVIDIA
    )
    memory_total_mib = models.PositiveIntegerField(_("memory (MiB)"), default=0)
    pci_bus_id = models.CharField(_("PCI bus ID"), max_length=32, blank=True)
    serial = models.CharField(_("serial"), max_length=64, blank=True)
    health = models.CharField(
        _("health"), max_length=16, choices=GpuHealth, default=GpuHealth.UNKNOWN
    )
    # Why the card is not ok, in the vendor tool's words (the agent's health_detail).
    health_detail = models.CharField(_("health detail"), max_length=512, blank=True)
    mig_mode = models.BooleanField(_("MIG mode"), default=False)
    last_seen = models.DateTimeField(_("last seen"), null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = _DeletesWaitForCycles.as_manager()

    class Meta:
        ordering = ["node_id", "index"]
        verbose_name = _("GPU")
        verbose_name_plural = _("GPUs")
        # vendor: the few cards that are not NVIDIA's, found without a scan (a slice's
        # placement asks whether its pool holds any, pools.services.slice_refusal).
        indexes = [models.Index(fields=["node", "index"]), models.Index(fields=["vendor"])]

    def __str__(self) -> str:
        return f"{self.node.name}/{self.index} {self.model}"
