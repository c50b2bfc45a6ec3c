"""Tenants, their members and roles, their quotas per pool, and their GPU requests.

A tenant may use a pool when it has a quota there: the quota row is also the pool's door
and the lock that serializes the tenant's placements in it (``quotas.requests.services``).
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.choices import GpuVendor
from pools.models import Lease, Pool
from quotas.choices import DECIDING_ROLES, BudgetPeriod, NoticeKind, RequestState, Role


class Tenant(models.Model):
    """A team: its members hold GPUs under its quotas."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    slug = models.SlugField(_("slug"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("tenant")
        verbose_name_plural = _("tenants")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("quotas:tenant_detail", args=[self.slug])


class MembershipQuerySet(models.QuerySet):
    """The questions asked of memberships, each written once: whose, which roles."""

    def of(self, user) -> MembershipQuerySet:
        """The memberships of ``user`` (a user or a user's id; none for anonymous)."""
        return self.filter(user_id=getattr(user, "pk", user))

    def deciding(self) -> MembershipQuerySet:
        """Those whose role decides the tenant's requests: approvers and tenant admins."""
        return self.filter(role__in=DECIDING_ROLES)

    def admins(self) -> MembershipQuerySet:
        return self.filter(role=Role.ADMIN)

    def active(self) -> MembershipQuerySet:
        """Of active users (a deactivated admin administers nothing)."""
        return self.filter(user__is_active=True)


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(_("role"), max_length=16, choices=Role, default=Role.MEMBER)
    created = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["tenant_id", "user_id"]
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.tenant} ({self.get_role_display()})"


def _nonneg(field_class, label, **kwargs):
    return field_class(label, validators=[MinValueValidator(0)], **kwargs)


class Quota(models.Model):
    """What a tenant may hold in a pool, per dimension a guarantee and a limit, and how
    its requests there are approved. Its existence opens the pool to the tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="quotas")
    # Above its guarantee, up to its limit, a tenant borrows idle capacity that can be
    # taken back with notice when another tenant needs its guarantee.
    guaranteed_vgpus = models.PositiveIntegerField(_("guaranteed vGPUs"), default=0)
    limit_vgpus = models.PositiveIntegerField(_("vGPU limit"), default=0)
    guaranteed_compute_pct = models.PositiveIntegerField(_("guaranteed compute (%)"), default=0)
    limit_compute_pct = models.PositiveIntegerField(_("compute limit (%)"), default=0)
    guaranteed_memory_mib = models.PositiveBigIntegerField(_("guaranteed memory (MiB)"), default=0)
    limit_memory_mib = models.PositiveBigIntegerField(_("memory limit (MiB)"), default=0)
    guaranteed_gpu_hours = models.PositiveIntegerField(_("guaranteed GPU-hours"), default=0)
    limit_gpu_hours = models.PositiveIntegerField(_("GPU-hour budget"), default=0)
    budget_period = models.CharField(
        _("budget period"), max_length=16, choices=BudgetPeriod, default=BudgetPeriod.MONTH
    )
    # Optional caps for any one member inside the tenant (None: none).
    user_limit_vgpus = models.PositiveIntegerField(_("vGPUs per member"), null=True, blank=True)
    user_limit_compute_pct = models.PositiveIntegerField(
        _("compute per member (%)"), null=True, blank=True
    )
    user_limit_memory_mib = models.PositiveBigIntegerField(
        _("memory per member (MiB)"), null=True, blank=True
    )
    # Approval policy: requests within all of these are approved at once (0: never).
    auto_approve_vgpus = models.PositiveIntegerField(_("auto-approve up to vGPUs"), default=0)
    auto_approve_compute_pct = models.PositiveIntegerField(
        _("auto-approve up to compute (%)"), default=0, validators=[MaxValueValidator(100)]
    )
    auto_approve_hours = models.PositiveIntegerField(_("auto-approve up to hours"), default=0)
    escalate_after_hours = models.PositiveIntegerField(
        _("escalate to the tenant admin after (hours)"), default=4
    )
    expire_pending_after_hours = models.PositiveIntegerField(
        _("expire pending requests after (hours)"), default=72
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["tenant_id", "pool_id"]
        verbose_name = _("quota")
        verbose_name_plural = _("quotas")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "pool"], name="one_quota_per_pool"),
            models.CheckConstraint(
                condition=Q(guaranteed_vgpus__lte=models.F("limit_vgpus"))
                & Q(guaranteed_compute_pct__lte=models.F("limit_compute_pct"))
                & Q(guaranteed_memory_mib__lte=models.F("limit_memory_mib"))
                & Q(guaranteed_gpu_hours__lte=models.F("limit_gpu_hours")),
                name="guarantee_within_limit",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant} · {self.pool}"


class GpuRequest(models.Model):
    """A member's ask for vGPUs in a pool, for a tenant; pending → approved (queued) or
    rejected → allocated → released or expired. Every change is audited."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="requests")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="requests")
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_requests"
    )
    count = models.PositiveSmallIntegerField(
        _("vGPUs"), default=1, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    whole_card = models.BooleanField(_("whole cards"), default=False)
    compute_pct = models.PositiveSmallIntegerField(
        _("compute per vGPU (%)"), default=100,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
    )  # fmt: skip
    memory_mib = models.PositiveIntegerField(
        _("memory per vGPU (MiB)"), default=1024, validators=[MinValueValidator(1)]
    )
    gpu_model = models.CharField(_("GPU model"), max_length=128, blank=True)
    # "": any vendor; else only that vendor's cards (agents.choices.GpuVendor).
    gpu_vendor = models.CharField(_("GPU vendor"), max_length=32, blank=True, choices=GpuVendor)
    node_name = models.CharField(_("node"), max_length=255, blank=True)
    node_labels = models.JSONField(_("node labels"), default=dict, blank=True)
    same_node = models.BooleanField(_("all on one node"), default=False)
    # None: open-ended, until released.
    duration_hours = models.PositiveIntegerField(
        _("duration (hours)"), null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(24 * 366)],
    )  # fmt: skip
    reason = models.TextField(_("reason"), max_length=2000)
    priority = models.SmallIntegerField(_("priority"), default=0)
    state = models.CharField(
        _("state"), max_length=16, choices=RequestState, default=RequestState.PENDING
    )
    # Placed above the tenant's guarantee: may be taken back, with notice.
    borrowed = models.BooleanField(_("borrowed capacity"), default=False)
    lease = models.OneToOneField(
        Lease, on_delete=models.PROTECT, null=True, blank=True, related_name="gpu_request"
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="decided_gpu_requests",
    )  # fmt: skip
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    decision_comment = models.TextField(_("comment"), blank=True, max_length=2000)
    escalated_at = models.DateTimeField(_("escalated at"), null=True, blank=True)
    queued_at = models.DateTimeField(_("queued at"), null=True, blank=True)
    placed_at = models.DateTimeField(_("placed at"), null=True, blank=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    expiry_warned_at = models.DateTimeField(_("expiry warning sent at"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    # An extension beyond the policy, waiting for an approver (None: none asked).
    extension_hours = models.PositiveIntegerField(
        _("extension asked (hours)"), null=True, blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(24 * 366)],
    )  # fmt: skip
    extension_asked_at = models.DateTimeField(_("extension asked at"), null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = _("GPU request")
        verbose_name_plural = _("GPU requests")
        indexes = [
            models.Index(fields=["tenant", "state"]),
            models.Index(fields=["pool", "state", "priority", "queued_at"]),
        ]

    def __str__(self) -> str:
        return _("Request %(id)s") % {"id": self.pk}

    def get_absolute_url(self) -> str:
        return reverse("requests:request_detail", args=[self.pk])


class Notice(models.Model):
    """One step of a request told to one person in the portal (the list on their page and
    the badge); worded when read, in the reader's language, from ``kind``."""

    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="request_notices"
    )
    gpu_request = models.ForeignKey(GpuRequest, on_delete=models.CASCADE, related_name="notices")
    kind = models.CharField(_("kind"), max_length=32, choices=NoticeKind)
    comment = models.TextField(_("comment"), blank=True, max_length=2000)
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    read_at = models.DateTimeField(_("read at"), null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name = _("notice")
        verbose_name_plural = _("notices")
        indexes = [models.Index(fields=["recipient", "read_at"])]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} · {self.gpu_request_id}"


class SentNotice(models.Model):
    """A request step to tell (its signal and pushes), by the key ``announce`` gave it:
    written with the step, untold (``sent_at`` and ``pushed_at`` None, the step kept).
    The worker's claim sets ``sent_at`` with the signal's e-mail and IM deliveries, so a
    task message handed out again mails nobody twice; ``pushed_at`` is set once the live
    pages were pushed the step, after the claim. The sweep sends again a step not yet
    pushed: its message was lost, or its worker died between the claim and the push
    (``quotas.requests.notices``)."""

    key = models.UUIDField(primary_key=True)
    sent_at = models.DateTimeField(null=True, blank=True, db_index=True)
    pushed_at = models.DateTimeField(null=True, blank=True)
    step = models.JSONField(null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("sent notice")
        verbose_name_plural = _("sent notices")
        indexes = [
            models.Index(fields=["created"], condition=models.Q(pushed_at=None),
                         name="quotas_notice_unpushed"),
        ]  # fmt: skip

    def __str__(self) -> str:
        return str(self.key)


class UserPreference(models.Model):
    """How one person reads the portal: the language and the time zone of their pages,
    e-mails and IM messages. Empty fields follow the default: the browser's language, the
    site's ``TIME_ZONE`` (``quotas.tenancy.preferences``)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
        related_name="preference",
    )  # fmt: skip
    language = models.CharField(
        _("language"), max_length=16, blank=True, choices=settings.LANGUAGES
    )
    time_zone = models.CharField(_("time zone"), max_length=64, blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("user preference")
        verbose_name_plural = _("user preferences")

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language or '-'} {self.time_zone or '-'}"
