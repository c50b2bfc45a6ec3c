"""A Kubernetes cluster the portal writes its quotas into, and which namespaces are whose."""

from __future__ import annotations

from cryptography import x509
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from agents.models import token_hint
from clusters.choices import Enforcement
from pools.models import Pool
from portal import crypto
from quotas.models import Tenant

# A namespace name as Kubernetes takes it (RFC 1123 label).
namespace_name = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    _("A namespace is up to 63 lower-case letters, digits and '-', starting and ending with a"
      " letter or digit."),
)  # fmt: skip


def pem_certificates(value: str) -> None:
    """A CA bundle: one or more PEM certificates, nothing the TLS client would choke on later."""
    try:
        x509.load_pem_x509_certificates(value.encode())
    except ValueError:
        raise ValidationError(
            _("Not a PEM certificate bundle (-----BEGIN CERTIFICATE----- ...)."), code="pem"
        ) from None


class Cluster(models.Model):
    name = models.CharField(_("name"), max_length=100, unique=True)
    api_url = models.URLField(_("API URL"), max_length=500)
    ca_bundle = models.TextField(
        _("CA bundle (PEM)"), blank=True, validators=[pem_certificates],
        help_text=_("Blank: the system's trusted authorities."),
    )  # fmt: skip
    # The portal presents the token to the API server, so it is kept encrypted as agent
    # tokens are (portal.crypto), never hashed, and only its hint is ever shown.
    token_encrypted = models.TextField(_("service-account token (encrypted)"), blank=True)
    token_hint = models.CharField(_("service-account token hint"), max_length=8, blank=True)
    enforcement = models.CharField(
        _("enforcement"), max_length=16, choices=Enforcement, default=Enforcement.HAMI
    )
    kueue = models.BooleanField(
        _("Kueue"), default=True, help_text=_("Write ClusterQueues and LocalQueues (Kueue 0.19).")
    )
    pool = models.ForeignKey(
        Pool, on_delete=models.PROTECT, related_name="clusters", verbose_name=_("pool")
    )
    # What the last sync found (clusters.sync): when, what it wrote, what drifted, any error.
    synced_at = models.DateTimeField(_("last synced"), null=True, blank=True)
    sync_error = models.TextField(_("last sync error"), blank=True)
    sync_report = models.JSONField(_("last sync report"), default=list, blank=True)
    # Why the last reading of its nodes and cards failed as a whole (clusters.inventory);
    # a node refused alone keeps its own error (ClusterNode.error).
    inventory_error = models.TextField(_("last inventory error"), blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("cluster")
        verbose_name_plural = _("clusters")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("clusters:detail", args=[self.pk])

    @property
    def token(self) -> str:
        """The token in clear, for the sync only."""
        return crypto.decrypt(self.token_encrypted) if self.token_encrypted else ""

    @token.setter
    def token(self, value: str) -> None:
        self.token_encrypted = crypto.encrypt(value) if value else ""
        self.token_hint = token_hint(value)


class NamespaceMapping(models.Model):
    """Pods in this namespace of the cluster run under this tenant's quota."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="namespaces")
    namespace = models.CharField(_("namespace"), max_length=63, validators=[namespace_name])
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="cluster_namespaces",
        verbose_name=_("tenant"),
    )  # fmt: skip

    class Meta:
        ordering = ["namespace"]
        verbose_name = _("namespace mapping")
        verbose_name_plural = _("namespace mappings")
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace"], name="one_tenant_per_namespace"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster} / {self.namespace}"


class ClusterNode(models.Model):
    """A node of the cluster with GPUs (clusters.inventory): its name in the cluster, the
    portal's read-only node for it (source Kubernetes), and why it was last refused."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(_("name"), max_length=253)
    node = models.ForeignKey(
        "agents.Node", on_delete=models.SET_NULL, null=True, blank=True,
        related_name="cluster_nodes", verbose_name=_("portal node"),
    )  # fmt: skip
    # Refused (a malformed annotation or ResourceSlice), or gone from the cluster; blank: ok.
    error = models.TextField(_("error"), blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("cluster node")
        verbose_name_plural = _("cluster nodes")
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="one_row_per_cluster_node")
        ]

    def __str__(self) -> str:
        return f"{self.cluster} / {self.name}"


class WorkloadState(models.TextChoices):
    GATED = "gated", _("gated: waiting for its request")
    ADMITTED = "admitted", _("gate removed")
    HELD = "held", _("held: its request ended without GPUs")
    REFUSED = "refused", _("refused: no request made")
    ENDED = "ended", _("ended: its request released")


class ClusterWorkload(models.Model):
    """A gated Pod the controller turned into a request (clusters.gates): one per uid, so
    no pass ever asks twice for the same workload."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="workloads")
    namespace = models.CharField(_("namespace"), max_length=63)
    kind = models.CharField(_("kind"), max_length=32, default="Pod")
    name = models.CharField(_("name"), max_length=253)
    uid = models.CharField(_("uid"), max_length=64)
    request = models.OneToOneField(
        "quotas.GpuRequest", on_delete=models.PROTECT, null=True, blank=True,
        related_name="cluster_workload", verbose_name=_("request"),
    )  # fmt: skip
    state = models.CharField(
        _("state"), max_length=16, choices=WorkloadState, default=WorkloadState.GATED
    )
    # Why it was refused, or the last error acting on it; shown to admins, logged.
    error = models.TextField(_("error"), blank=True)
    # The request state last told to the workload by an Event, so each is told once.
    told = models.CharField(_("last state told"), max_length=16, blank=True)
    # Its GPUs are to be taken back (reports' reclaim warning: idle, or borrowed) after this
    # unless used again; told to the workload once by an Event, then it is evicted.
    reclaim_after = models.DateTimeField(_("taken back after"), null=True, blank=True)
    reclaim_cause = models.CharField(_("taken back because"), max_length=16, blank=True)
    reclaim_told = models.BooleanField(default=False)
    # Where the cluster runs it, read back from the cluster (clusters.readback): the node(s)
    # and the card uuids, one per vGPU; what the portal's books could not follow (a card it
    # does not know, one full in its books); and a read-back the portal refused.
    node = models.CharField(_("runs on node"), max_length=255, blank=True)
    devices = models.JSONField(_("runs on cards"), default=list, blank=True)
    mismatch = models.TextField(_("differs from the portal's books"), blank=True)
    readback_error = models.TextField(_("read-back refused"), blank=True)
    # Standalone ResourceClaims it names (resourceClaimName): deleted once its request is
    # released, so no other Pod can take their devices past the portal.
    claims = models.JSONField(_("standalone ResourceClaims"), default=list, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = _("cluster workload")
        verbose_name_plural = _("cluster workloads")
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uid"], name="one_link_per_workload")
        ]

    def __str__(self) -> str:
        return f"{self.cluster} / {self.namespace}/{self.name}"
