"""Pools of physical cards, the vGPU slices placed on them, and the leases that hold them.

A card belongs to at most one pool (``PoolCard``); the card row carries its running totals
(compute and memory allocated, slice count), so a placement checks and takes capacity with
one conditional UPDATE per card, and the reconciliation pass (``pools.reconcile``) proves
the totals against the allocations. A lease is one all-or-nothing placement of N vGPUs
(one per card); the apps above hold leases (a GPU request holds one) without pools
knowing them.
"""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import (
    BooleanField,
    Case,
    ExpressionWrapper,
    F,
    FloatField,
    IntegerField,
    Q,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Least, NullIf
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from agents.choices import GpuVendor
from agents.models import GPU, Node
from pools.choices import AgentSync, AllocationState, LeaseState, PlacementPolicy
from pools.placement import MAX_COMPUTE_PCT

MAX_RATIO = Decimal("10")
_ratio_validators = [MinValueValidator(Decimal("1")), MaxValueValidator(MAX_RATIO)]


class Pool(models.Model):
    """A named set of cards, chosen by model, vendor, node labels or by hand."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    slug = models.SlugField(_("slug"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    # Matching rules: a card joins when it matches all rules given (an empty rule matches
    # all) and is in no other pool. Cards added by hand stay whatever the rules say.
    match_models = models.JSONField(_("GPU models"), default=list, blank=True)
    match_vendor = models.CharField(_("vendor"), max_length=32, blank=True, choices=GpuVendor)
    match_labels = models.JSONField(_("node labels"), default=dict, blank=True)
    match_by_rules = models.BooleanField(_("add matching cards automatically"), default=True)
    compute_ratio = models.DecimalField(
        _("compute oversubscription"), max_digits=4, decimal_places=2,
        default=Decimal("1"), validators=_ratio_validators,
    )  # fmt: skip
    memory_ratio = models.DecimalField(
        _("memory oversubscription"), max_digits=4, decimal_places=2,
        default=Decimal("1"), validators=_ratio_validators,
    )  # fmt: skip
    policy = models.CharField(
        _("placement policy"), max_length=16, choices=PlacementPolicy,
        default=PlacementPolicy.BINPACK,
    )  # fmt: skip
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("pool")
        verbose_name_plural = _("pools")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("pools:pool_detail", args=[self.slug])

    def compute_capacity(self) -> int:
        """One card's compute in percent points, oversubscription included (100 x ratio)."""
        return int(100 * self.compute_ratio)

    def memory_capacity(self, physical_mib: int) -> int:
        return int(physical_mib * self.memory_ratio)


def _free_share(capacity: str, allocated: str):
    free = Cast(F(capacity) - F(allocated), FloatField())
    return Coalesce(free / NullIf(Cast(F(capacity), FloatField()), Value(0.0)), Value(0.0))


_COMPUTE_SHARE = _free_share("compute_capacity", "compute_allocated")
_MEMORY_SHARE = _free_share("memory_capacity_mib", "memory_allocated_mib")
# placement.binpack_key in SQL (empty cards last, smallest free share, both shares, id),
# so that the allocation service reads the best few candidates through an index.
BINPACK_ORDER = (
    ExpressionWrapper(Q(slices=0), output_field=BooleanField()),
    Least(_COMPUTE_SHARE, _MEMORY_SHARE),
    _COMPUTE_SHARE + _MEMORY_SHARE,
    F("gpu"),
)


class PoolCard(models.Model):
    """A card in a pool, with what is allocated on it (kept by the allocation service)."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="cards")
    gpu = models.OneToOneField(GPU, on_delete=models.CASCADE, related_name="pool_card")
    added_by_hand = models.BooleanField(_("added by hand"), default=False)
    # Capacity with the pool's ratios applied, kept here (set when the card joins or the
    # ratios change) so that taking capacity is one UPDATE on this row's own columns.
    compute_capacity = models.PositiveIntegerField(_("compute capacity (%)"), default=100)
    memory_capacity_mib = models.PositiveBigIntegerField(_("memory capacity (MiB)"), default=0)
    compute_allocated = models.PositiveIntegerField(_("compute allocated (%)"), default=0)
    memory_allocated_mib = models.PositiveBigIntegerField(_("memory allocated (MiB)"), default=0)
    slices = models.PositiveIntegerField(_("slices"), default=0)
    # Held whole by one allocation: no other slice may join it.
    held_whole = models.BooleanField(_("held whole"), default=False)
    # A cordoned card takes no new slices (critical XID, uncorrectable ECC, or by an admin)
    # until an admin clears it.
    cordoned_at = models.DateTimeField(_("cordoned at"), null=True, blank=True)
    cordon_reason = models.CharField(_("cordon reason"), max_length=255, blank=True)
    # The fault counters last read from the card's agent ({"xid": last XID, "ecc":
    # uncorrectable ECC count}): a cordon follows a change, not a value that stays.
    fault_marks = models.JSONField(_("fault counters last seen"), default=dict, blank=True)

    class Meta:
        ordering = ["pool_id", "gpu_id"]
        verbose_name = _("pool card")
        verbose_name_plural = _("pool cards")
        indexes = [
            models.Index(
                F("pool"),
                *BINPACK_ORDER,
                name="poolcard_binpack",
                condition=Q(held_whole=False, cordoned_at=None),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(held_whole=False) | Q(slices__lte=1), name="whole_card_one_slice"
            ),
            # The last line of defence: no transaction can commit an overcommitted card.
            models.CheckConstraint(
                condition=Q(compute_allocated__lte=models.F("compute_capacity")),
                name="compute_within_capacity",
            ),
            models.CheckConstraint(
                condition=Q(memory_allocated_mib__lte=models.F("memory_capacity_mib")),
                name="memory_within_capacity",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.pool} · {self.gpu_id}"

    @property
    def cordoned(self) -> bool:
        return self.cordoned_at is not None


class Lease(models.Model):
    """N vGPUs placed together, all or nothing; what a GPU request holds once placed."""

    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="leases")
    holder = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="gpu_leases"
    )
    # The Unix user whose processes the agents attribute to these slices by default.
    unix_user = models.CharField(_("Unix user"), max_length=64)
    label = models.CharField(_("label"), max_length=200, blank=True)
    state = models.CharField(
        _("state"), max_length=16, choices=LeaseState, default=LeaseState.ACTIVE
    )
    # The ask, kept so that a slice can be re-placed alike when its card fails.
    count = models.PositiveSmallIntegerField(_("vGPUs"))
    compute_pct = models.PositiveSmallIntegerField(
        _("compute per vGPU (%)"), validators=[MinValueValidator(1), MaxValueValidator(100)]
    )
    memory_mib = models.PositiveIntegerField(_("memory per vGPU (MiB)"))
    whole_card = models.BooleanField(_("whole cards"), default=False)
    gpu_model = models.CharField(_("GPU model"), max_length=128, blank=True)
    gpu_vendor = models.CharField(_("GPU vendor"), max_length=32, blank=True, choices=GpuVendor)
    node_name = models.CharField(_("node"), max_length=255, blank=True)
    node_labels = models.JSONField(_("node labels"), default=dict, blank=True)
    same_node = models.BooleanField(_("all on one node"), default=False)
    created = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(_("released at"), null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        verbose_name = _("lease")
        verbose_name_plural = _("leases")

    def __str__(self) -> str:
        return self.label or f"lease {self.pk}"


class Allocation(models.Model):
    """One vGPU: a slice of one card (compute %, memory MiB) held by a lease."""

    lease = models.ForeignKey(Lease, on_delete=models.PROTECT, related_name="allocations")
    pool = models.ForeignKey(Pool, on_delete=models.PROTECT, related_name="allocations")
    # Kept when the card is deleted (SET_NULL): the allocation is then stranded, shown and
    # re-placed, never silently dropped.
    gpu = models.ForeignKey(
        GPU, on_delete=models.SET_NULL, null=True, blank=True, related_name="allocations"
    )
    compute_pct = models.PositiveSmallIntegerField(_("compute (%)"))
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"))
    whole_card = models.BooleanField(_("whole card"), default=False)
    state = models.CharField(
        _("state"), max_length=16, choices=AllocationState, default=AllocationState.ACTIVE
    )
    stranded_reason = models.CharField(_("why it needs re-placement"), max_length=255, blank=True)
    agent_sync = models.CharField(
        _("agent"), max_length=16, choices=AgentSync, default=AgentSync.PENDING
    )
    # Why the agent did not take it (its refusal, or no answer): for admins only.
    agent_error = models.CharField(_("agent error"), max_length=200, blank=True)
    # Sends since it was placed that the agent did not confirm; FAILED after
    # POOLS_SYNC_MAX_ATTEMPTS.
    agent_attempts = models.PositiveSmallIntegerField(_("unconfirmed sends"), default=0)
    created = models.DateTimeField(auto_now_add=True)
    placed_at = models.DateTimeField(_("placed at"), null=True, blank=True)
    released_at = models.DateTimeField(_("released at"), null=True, blank=True)

    class Meta:
        ordering = ["lease_id", "id"]
        verbose_name = _("allocation")
        verbose_name_plural = _("allocations")
        indexes = [models.Index(fields=["gpu", "state"]), models.Index(fields=["state"])]

    def __str__(self) -> str:
        return f"vGPU {self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("pools:allocation_detail", args=[self.pk])

    @property
    def agent_id(self) -> str:
        """The id the agent knows the slice by (its ``allocation_id``)."""
        return f"alloc-{self.pk}"


class AllocationSpan(models.Model):
    """A closed stretch of an allocation's held time on one card, kept when the slice
    left that card: moved by failover or by a cluster's scheduler, or stranded. The
    allocation row keeps its id and goes on from the move (its ``placed_at`` is when it
    was placed on its current card; None while stranded, holding nothing), so GPU-hours,
    quota usage and per-card history read the allocation's own open stretch plus these."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="spans")
    gpu = models.ForeignKey(
        GPU, on_delete=models.SET_NULL, null=True, blank=True, related_name="allocation_spans"
    )
    compute_pct = models.PositiveSmallIntegerField(_("compute (%)"))
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"))
    whole_card = models.BooleanField(_("whole card"), default=False)
    placed_at = models.DateTimeField(_("placed at"))
    released_at = models.DateTimeField(_("released at"))
    reason = models.CharField(_("why it ended"), max_length=255, blank=True)

    class Meta:
        ordering = ["allocation_id", "placed_at"]
        verbose_name = _("held span")
        verbose_name_plural = _("held spans")
        indexes = [models.Index(fields=["gpu", "released_at"])]
        constraints = [
            models.CheckConstraint(
                condition=Q(released_at__gte=models.F("placed_at")), name="span_not_reversed"
            )
        ]

    def __str__(self) -> str:
        return f"vGPU {self.allocation_id} {self.placed_at:%Y-%m-%d %H:%M}"

    @classmethod
    def close(cls, allocation: Allocation, now, reason: str) -> AllocationSpan | None:
        """Keep the allocation's stretch on its current card, up to ``now`` (nothing when
        it holds none: stranded, never placed)."""
        if allocation.placed_at is None or allocation.placed_at >= now:
            return None
        return cls.objects.create(
            allocation=allocation, gpu_id=allocation.gpu_id,
            compute_pct=allocation.compute_pct, memory_mib=allocation.memory_mib,
            whole_card=allocation.whole_card, placed_at=allocation.placed_at,
            released_at=now, reason=reason,
        )  # fmt: skip


# ``placement.share_pct`` over an allocation's columns, for sums the database does.
SHARE_PCT = Case(When(whole_card=True, then=Value(MAX_COMPUTE_PCT)), default=F("compute_pct"),
                 output_field=IntegerField())  # fmt: skip


class NodeSync(models.Model):
    """What pools last sent a node's agent (its desired slices) and what it answered."""

    node = models.OneToOneField(
        Node, on_delete=models.CASCADE, primary_key=True, related_name="pool_sync"
    )
    # The agent's desired-state generation from its last 200; None before any.
    generation = models.PositiveBigIntegerField(_("generation"), null=True, blank=True)
    slices = models.PositiveIntegerField(_("slices sent"), default=0)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    confirmed_at = models.DateTimeField(_("confirmed at"), null=True, blank=True)
    # The last send's failure, short; for admins only (agents' texts are not for members).
    error = models.CharField(_("error"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("agent sync")
        verbose_name_plural = _("agent syncs")

    def __str__(self) -> str:
        return f"sync of node {self.node_id}"
