"""History: 1-minute and 1-hour rollups per card and per process owner (telemetry.rollups)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from agents.gpu_agent import schema
from agents.models import GPU


def _history_columns(model: type[models.Model], fields: tuple[schema.Field, ...]) -> None:
    """Add each history field's average and peak columns: the reading schema declares them
    (adding one is a declaration there and a migration)."""
    for field in fields:
        for column in field.history.columns():
            model.add_to_class(column, models.FloatField(null=True))


class _Rollup(models.Model):
    """Aggregates of the readings in one time bucket (its start): avg and max per metric."""

    bucket = models.DateTimeField(_("bucket start"))
    samples = models.PositiveIntegerField(_("samples"))

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"GPU {self.gpu_id} @ {self.bucket:%Y-%m-%d %H:%M}"


_history_columns(_Rollup, schema.HISTORY_GPU_FIELDS)


class GpuMinute(_Rollup):
    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "bucket"], name="gpuminute_gpu_bucket")
        ]
        indexes = [models.Index(fields=["bucket"], name="gpuminute_bucket")]


class GpuHour(_Rollup):
    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "bucket"], name="gpuhour_gpu_bucket")]
        indexes = [models.Index(fields=["bucket"], name="gpuhour_bucket")]


class _OwnerRollup(models.Model):
    """What one process owner (a Unix user) used of one card in one time bucket."""

    owner = models.CharField(_("owner"), max_length=64)
    bucket = models.DateTimeField(_("bucket start"))
    samples = models.PositiveIntegerField(_("samples"))

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.owner} on GPU {self.gpu_id} @ {self.bucket:%Y-%m-%d %H:%M}"


_history_columns(_OwnerRollup, schema.HISTORY_PROCESS_FIELDS)


class OwnerMinute(_OwnerRollup):
    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        # Who runs what on a card is not every member's business (telemetry.permissions).
        permissions = [("view_process_owners", _("Can see the process owners of any card"))]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "owner", "bucket"], name="ownerminute_gpu_owner_bucket"
            )
        ]
        indexes = [
            models.Index(fields=["bucket"], name="ownerminute_bucket"),
            models.Index(fields=["owner", "bucket"], name="ownerminute_owner_bucket"),
        ]


class OwnerHour(_OwnerRollup):
    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="+", db_index=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "owner", "bucket"], name="ownerhour_gpu_owner_bucket"
            )
        ]
        indexes = [
            models.Index(fields=["bucket"], name="ownerhour_bucket"),
            models.Index(fields=["owner", "bucket"], name="ownerhour_owner_bucket"),
        ]


class RollupClaim(models.Model):
    """A sample-buffer claim already merged, so a claim retried after its commit is not merged
    twice; one row (``fold:hours``) holds the first minute not folded into hours yet.

    Written only by telemetry.rollups, in raw SQL inside the transaction that merges the claim.
    """

    claim = models.CharField(max_length=200, primary_key=True)
    minute = models.BigIntegerField()

    def __str__(self) -> str:
        return self.claim


class CardClaim(models.Model):
    """A node reporting a card (by UUID) that the inventory has on another node.

    The card stays where it is, and both nodes show the conflict in ``last_error``, until
    an admin decides: deletes the card or its node (the next answer then records it on
    the reporting node), or moves it with the admin action. The claim goes away with
    either, or when the node stops reporting the card (telemetry.card_claims).
    """

    gpu = models.ForeignKey(GPU, on_delete=models.CASCADE, related_name="+")
    node = models.ForeignKey(
        "agents.Node", on_delete=models.CASCADE, related_name="+", verbose_name=_("reported by")
    )
    since = models.DateTimeField(_("since"))

    class Meta:
        verbose_name = _("card claimed by a second node")
        verbose_name_plural = _("cards claimed by a second node")
        constraints = [models.UniqueConstraint(fields=["gpu", "node"], name="cardclaim_gpu_node")]

    def __str__(self) -> str:
        return f"{self.gpu_id} claimed by node {self.node_id}"
