"""The idle report, reclaim warnings, exemptions and the monthly accounting over the API.
Writes go through ``reports.services``; its refusals come back as 404 (others' leases
are absent) and its validation errors as field-level 400s that changed nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import exceptions, serializers

from reports.api.docs import (
    APPEAL_DECISION_EXAMPLES,
    APPEAL_EXAMPLES,
    EXEMPTION_EXAMPLES,
    IDLE_EXAMPLES,
)
from reports.models import AllocationIdle, Exemption, IdleCard, ReclaimWarning
from reports.report import as_dict
from reports.services import MAX_TEXT


def call_service(fn: Callable[..., Any], *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except PermissionError:
        raise exceptions.NotFound() from None


class AllocationIdleSerializer(serializers.ModelSerializer):
    """One live allocation in the last idle scan (every few minutes)."""

    row = serializers.SerializerMethodField()

    class Meta:
        model = AllocationIdle
        fields = ["row", "sparkline", "scanned_at", "coverage"]

    def get_row(self, obj: AllocationIdle) -> dict[str, Any]:
        return as_dict(obj)

    def to_representation(self, instance: AllocationIdle) -> dict[str, Any]:
        data = super().to_representation(instance)
        return {**data.pop("row"), **data}


@extend_schema_field({"oneOf": [{"type": "integer"}, {"type": "string", "enum": [""]}]})
class _CardIndexField(serializers.ReadOnlyField):
    """The card's index on its node; empty when the vGPU has no card (stranded)."""


# What the schema says of AllocationIdleSerializer's answer, which puts the row's fields
# (reports.report.as_dict) beside the scan's: the views answer with that serializer.
@extend_schema_serializer(component_name="AllocationIdle", examples=IDLE_EXAMPLES)
class AllocationIdleAnswerSerializer(serializers.Serializer):
    allocation = serializers.IntegerField()
    lease = serializers.IntegerField()
    tenant = serializers.CharField(help_text="Empty for a vGPU asked for without a tenant.")
    pool = serializers.CharField(help_text="The pool's slug.")
    node = serializers.CharField()
    gpu = _CardIndexField()
    owner = serializers.CharField()
    unix_user = serializers.CharField()
    idle = serializers.BooleanField()
    idle_since = serializers.CharField(help_text="ISO 8601; empty while it is in use.")
    idle_hours = serializers.FloatField()
    wasted_gpu_hours = serializers.FloatField()
    compute_pct = serializers.IntegerField()
    memory_mib = serializers.IntegerField()
    p95_util_pct = serializers.FloatField(allow_null=True)
    p95_memory_mib = serializers.FloatField(allow_null=True)
    over_provisioned = serializers.BooleanField()
    advice_compute_pct = serializers.IntegerField(allow_null=True)
    advice_memory_mib = serializers.IntegerField(allow_null=True)
    warned = serializers.BooleanField()
    exempt_until = serializers.CharField(help_text="ISO 8601; empty without an exemption.")
    sparkline = serializers.ListField(
        child=serializers.FloatField(allow_null=True),
        help_text="Utilization per step over the scan's range; null where nothing was read.",
    )
    scanned_at = serializers.DateTimeField()
    coverage = serializers.FloatField()


class IdleCardSerializer(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    # Annotated by reports.report.visible_cards.
    gpu_index = serializers.IntegerField(read_only=True, allow_null=True)
    node_name = serializers.CharField(read_only=True, allow_null=True)

    class Meta:
        model = IdleCard
        fields = [
            "gpu_id", "gpu_index", "pool", "node_id", "node_name", "state", "users", "scanned_at",
        ]  # fmt: skip


class ReclaimWarningSerializer(serializers.ModelSerializer):
    class Meta:
        model = ReclaimWarning
        fields = [
            "id", "lease", "tenant_id", "state", "warned_at", "release_after", "appeal_reason",
            "appealed_at", "decided_at", "decision_comment", "closed_at",
        ]  # fmt: skip
        read_only_fields = fields


@extend_schema_serializer(examples=APPEAL_EXAMPLES)
class AppealSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=MAX_TEXT)


@extend_schema_serializer(examples=APPEAL_DECISION_EXAMPLES)
class AppealDecisionSerializer(serializers.Serializer):
    grant = serializers.BooleanField()
    comment = serializers.CharField(max_length=MAX_TEXT, required=False, allow_blank=True)
    until = serializers.DateTimeField(required=False, allow_null=True)


@extend_schema_serializer(examples=EXEMPTION_EXAMPLES)
class ExemptionSerializer(serializers.ModelSerializer):
    reason = serializers.CharField(max_length=MAX_TEXT)

    class Meta:
        model = Exemption
        fields = ["id", "lease", "reason", "ends_at", "created_by", "created"]
        read_only_fields = ["id", "created_by", "created"]
