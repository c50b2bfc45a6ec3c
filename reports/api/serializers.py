"""The idle report, reclaim warnings, exemptions and the monthly accounting over the API.
Writes go through ``reports.services``; its refusals come back as 404 (others' leases
are absent) and its validation errors as field-level 400s that changed nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import exceptions, serializers

from reports.api.docs import IDLE_EXAMPLES
from reports.models import AllocationIdle, Exemption, IdleCard, ReclaimWarning
from reports.report import as_dict
from reports.services import MAX_TEXT


def call_service(fn: Callable[..., Any], *args, **kwargs) -> Any:
    try:
        return fn(*args, **kwargs)
    except PermissionError:
        raise exceptions.NotFound() from None
    except DjangoValidationError as exc:
        raise serializers.ValidationError(exc.message_dict) from None


# The example shows the answer as it is: the row's fields beside the scan's, not under row.
@extend_schema_serializer(examples=IDLE_EXAMPLES)
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


class AppealSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=MAX_TEXT)


class AppealDecisionSerializer(serializers.Serializer):
    grant = serializers.BooleanField()
    comment = serializers.CharField(max_length=MAX_TEXT, required=False, allow_blank=True)
    until = serializers.DateTimeField(required=False, allow_null=True)


class ExemptionSerializer(serializers.ModelSerializer):
    reason = serializers.CharField(max_length=MAX_TEXT)

    class Meta:
        model = Exemption
        fields = ["id", "lease", "reason", "ends_at", "created_by", "created"]
        read_only_fields = ["id", "created_by", "created"]
