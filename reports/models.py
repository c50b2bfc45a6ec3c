"""Idle detection's results, the reclaim policy per pool, its warnings, appeals and
exemptions, and the prices for chargeback.

``AllocationIdle`` is the scan's snapshot (``reports.scan``, every few minutes from beat):
the pages and the API read it, so a report over 20,000 allocations is one indexed query
rather than a pass over the rollups.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from pools.models import Allocation, Lease, Pool
from reports.choices import WarningCause, WarningState


class ReclaimPolicy(models.Model):
    """How a pool finds idle allocations and takes them back. A pool without one uses the
    defaults and never reclaims."""

    pool = models.OneToOneField(Pool, on_delete=models.CASCADE, related_name="reclaim_policy")
    idle_util_pct = models.PositiveSmallIntegerField(
        _("idle under utilization (%)"), default=5,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
    )  # fmt: skip
    idle_memory_pct = models.PositiveSmallIntegerField(
        _("idle under memory (percent of the allocation)"), default=10,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
    )  # fmt: skip
    idle_window_minutes = models.PositiveIntegerField(
        _("idle for (minutes)"), default=120,
        validators=[MinValueValidator(10), MaxValueValidator(36 * 60)],
    )  # fmt: skip
    reclaim = models.BooleanField(_("warn owners and reclaim idle allocations"), default=False)
    grace_hours = models.PositiveIntegerField(
        _("grace period after the warning (hours)"), default=24,
        validators=[MinValueValidator(1), MaxValueValidator(24 * 30)],
    )  # fmt: skip
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("reclaim policy")
        verbose_name_plural = _("reclaim policies")

    def __str__(self) -> str:
        return str(self.pool)

    @property
    def window(self) -> timedelta:
        return timedelta(minutes=self.idle_window_minutes)


class AllocationIdle(models.Model):
    """The last scan's verdict on one live allocation (one row each, replaced per scan)."""

    allocation = models.OneToOneField(
        Allocation, on_delete=models.CASCADE, primary_key=True, related_name="idle_state"
    )
    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="+")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    tenant_id = models.IntegerField(null=True, db_index=True)  # quotas.Tenant, when requested
    node_id = models.IntegerField(null=True)
    idle = models.BooleanField(default=False)
    idle_since = models.DateTimeField(null=True)
    quiet_since = models.DateTimeField(null=True)  # the unused run's start, idle or not yet
    idle_minutes = models.PositiveIntegerField(default=0)
    wasted_gpu_hours = models.FloatField(default=0)
    coverage = models.FloatField(default=0)
    over_provisioned = models.BooleanField(default=False)
    p95_util_pct = models.FloatField(null=True)
    p95_memory_mib = models.FloatField(null=True)
    advice_compute_pct = models.PositiveSmallIntegerField(null=True)
    advice_memory_mib = models.PositiveIntegerField(null=True)
    sparkline = models.JSONField(default=list)  # utilization per step over the scan's range
    scanned_at = models.DateTimeField()

    class Meta:
        # The report's default order, so a page of it is read from the index's head.
        indexes = [
            models.Index(fields=["-idle", "-wasted_gpu_hours", "allocation"], name="idle_wasted")
        ]

    def __str__(self) -> str:
        return f"idle state of {self.allocation_id}"


class IdleCard(models.Model):
    """The last scan's idle or foreign-used physical cards of the pools."""

    gpu_id = models.IntegerField(primary_key=True)
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="+")
    node_id = models.IntegerField()
    state = models.CharField(max_length=16)  # reports.choices.CardState
    users = models.CharField(max_length=255, blank=True)  # foreign process owners
    scanned_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"card {self.gpu_id} ({self.state})"


class Exemption(models.Model):
    """A lease kept out of reclaim until ``ends_at``, for a reason (a service busy a few
    days a month). Still shown idle in the report, never warned nor released."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="reclaim_exemptions")
    reason = models.CharField(_("reason"), max_length=500)
    ends_at = models.DateTimeField(_("ends at"))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ends_at"]
        verbose_name = _("reclaim exemption")
        verbose_name_plural = _("reclaim exemptions")

    def __str__(self) -> str:
        return f"exemption of lease {self.lease_id} until {self.ends_at:%Y-%m-%d}"


class ReclaimWarning(models.Model):
    """The owner of an idle (or borrowed, ``cause``) lease was warned: released after
    ``release_after`` unless it is busy again (idle) or no longer needed (borrowed),
    exempted, or an approver grants the owner's appeal."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="reclaim_warnings")
    tenant_id = models.IntegerField(null=True, db_index=True)
    cause = models.CharField(
        _("cause"), max_length=16, choices=WarningCause, default=WarningCause.IDLE
    )
    # The owner's words for a take-back (never the other tenant's name: tenants stay apart).
    reason = models.CharField(_("reason"), max_length=500, blank=True)
    # A take-back's waiting request (quotas.GpuRequest): withdrawn once it no longer waits.
    needed_by_id = models.IntegerField(null=True, blank=True, db_index=True)
    state = models.CharField(
        _("state"), max_length=16, choices=WarningState, default=WarningState.WARNED
    )
    warned_at = models.DateTimeField(_("warned at"))
    release_after = models.DateTimeField(_("released after"))
    appeal_reason = models.CharField(_("appeal"), max_length=500, blank=True)
    appealed_at = models.DateTimeField(_("appealed at"), null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )  # fmt: skip
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    decision_comment = models.CharField(_("comment"), max_length=500, blank=True)
    closed_at = models.DateTimeField(_("closed at"), null=True, blank=True)

    class Meta:
        ordering = ["-warned_at"]
        verbose_name = _("reclaim warning")
        verbose_name_plural = _("reclaim warnings")
        constraints = [
            # One open warning per lease: the scan's repeated passes never warn twice.
            models.UniqueConstraint(
                fields=["lease"],
                condition=models.Q(state__in=["warned", "appealed"]),
                name="one_open_warning_per_lease",
            )
        ]

    def __str__(self) -> str:
        return f"reclaim warning {self.pk} ({self.state})"


class UnitPrice(models.Model):
    """Chargeback prices per unit for a pool (no pool: the default for the others)."""

    pool = models.OneToOneField(
        Pool, on_delete=models.CASCADE, null=True, blank=True, related_name="unit_price"
    )
    currency = models.CharField(_("currency"), max_length=8, default="CNY")
    per_gpu_hour = models.DecimalField(
        _("per GPU-hour"), max_digits=12, decimal_places=4, default=Decimal(0),
        validators=[MinValueValidator(Decimal(0))],
    )  # fmt: skip
    per_compute_pct_hour = models.DecimalField(
        _("per compute-percent-hour"), max_digits=12, decimal_places=6, default=Decimal(0),
        validators=[MinValueValidator(Decimal(0))],
    )  # fmt: skip
    per_memory_gib_hour = models.DecimalField(
        _("per memory-GiB-hour"), max_digits=12, decimal_places=6, default=Decimal(0),
        validators=[MinValueValidator(Decimal(0))],
    )  # fmt: skip
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("unit price")
        verbose_name_plural = _("unit prices")
        constraints = [
            models.UniqueConstraint(
                fields=["pool"], name="one_price_per_pool", nulls_distinct=False
            )
        ]

    def __str__(self) -> str:
        return str(self.pool or _("default"))


class UsageDay(models.Model):
    """One day's accounting of one (tenant, user, pool), written by beat
    (``reports.accounting.materialize_day``) so that a month's report reads at most 31
    rows per group instead of the month's hour rollups."""

    day = models.DateField()
    tenant_id = models.IntegerField()
    user_id = models.IntegerField()
    pool_id = models.IntegerField()
    gpu_hours = models.DecimalField(max_digits=16, decimal_places=4)
    memory_gib_hours = models.DecimalField(max_digits=18, decimal_places=4)
    used_gpu_hours = models.FloatField(default=0)
    used_memory_gib_hours = models.FloatField(default=0)
    idle_gpu_hours = models.FloatField(default=0)
    computed_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "tenant_id", "user_id", "pool_id"], name="usageday_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.tenant_id}/{self.user_id}/{self.pool_id}"


class DigestSent(models.Model):
    """One row per scheduled send and period (the idle digest of 2026-12-04): inserted in
    the transaction that queues the send's deliveries, so a second beat, a redelivered
    task or a restarted beat finds the period taken and sends nothing (``digest.send_once``)."""

    name = models.CharField(max_length=64)
    period = models.CharField(max_length=32)
    sent_at = models.DateTimeField(auto_now_add=True)
    recipients = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "period"], name="digestsent_once_per_period")
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.period}"
