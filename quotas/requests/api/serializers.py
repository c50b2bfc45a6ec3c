"""The GPU request as the REST API reads and writes it, and the bodies of its actions.
Type and range checks only: ``quotas.requests.services`` holds the rules."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from agents.choices import GpuVendor
from pools.models import Allocation, Pool
from quotas.models import GpuRequest, Tenant
from quotas.requests.api.docs import (
    COMMENT_EXAMPLES,
    EXTEND_EXAMPLES,
    READ_EXAMPLES,
    RESIZE_EXAMPLES,
)
from quotas.requests.api.wait import MAX_WAIT_SECONDS
from quotas.requests.services import queue_position
from quotas.requests.views import allocation_url

MAX_HOURS = 24 * 366


class AllocationBriefSerializer(serializers.ModelSerializer):
    # None once the card is gone, as in the allocation's own answer.
    node = serializers.CharField(source="gpu.node.name", default=None, read_only=True,
                                 allow_null=True)  # fmt: skip
    gpu_uuid = serializers.CharField(source="gpu.uuid", default=None, read_only=True,
                                     allow_null=True)  # fmt: skip
    url = serializers.SerializerMethodField()

    class Meta:
        model = Allocation
        fields = ["id", "state", "node", "gpu_uuid", "compute_pct", "memory_mib", "whole_card",
                  "placed_at", "released_at", "url"]  # fmt: skip

    def get_url(self, allocation: Allocation) -> str:
        return allocation_url(allocation.pk)


def _labels(value: dict) -> dict:
    if len(value) > 16 or any(len(k) > 63 or len(v) > 63 for k, v in value.items()):
        raise serializers.ValidationError("At most 16 labels, keys and values up to 63 characters.")
    return value


# Every answer with a request (the actions' too) shows it placed, as READ_EXAMPLES do.
@extend_schema_serializer(examples=READ_EXAMPLES)
class GpuRequestSerializer(serializers.ModelSerializer):
    """A GPU request; quotas.requests.services.create_request writes it and holds the rules."""

    tenant = serializers.PrimaryKeyRelatedField(queryset=Tenant.objects.all())
    pool = serializers.PrimaryKeyRelatedField(queryset=Pool.objects.all())
    count = serializers.IntegerField(min_value=1, max_value=64, default=1)
    whole_card = serializers.BooleanField(default=False)
    compute_pct = serializers.IntegerField(min_value=1, max_value=100, default=100)
    memory_mib = serializers.IntegerField(min_value=1, max_value=10_000_000, default=1024)
    gpu_model = serializers.CharField(max_length=128, allow_blank=True, default="")
    gpu_vendor = serializers.ChoiceField(
        choices=GpuVendor.choices, allow_blank=True, default="",
        help_text="Only this vendor's cards; empty: any vendor.",
    )  # fmt: skip
    node_name = serializers.CharField(max_length=255, allow_blank=True, default="")
    node_labels = serializers.DictField(
        child=serializers.CharField(max_length=63, allow_blank=True), default=dict,
        validators=[_labels],
    )  # fmt: skip
    same_node = serializers.BooleanField(default=False)
    duration_hours = serializers.IntegerField(
        min_value=1, max_value=MAX_HOURS, allow_null=True, default=None,
        help_text="Empty or null: open-ended, until released.",
    )  # fmt: skip
    reason = serializers.CharField(max_length=2000)
    requester = serializers.CharField(source="requester.get_username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.get_username", read_only=True, default=None, allow_null=True
    )
    queue_position = serializers.SerializerMethodField()
    allocations = serializers.SerializerMethodField()

    class Meta:
        model = GpuRequest
        fields = [
            "id", "tenant", "pool", "requester", "count", "whole_card", "compute_pct",
            "memory_mib", "gpu_model", "gpu_vendor", "node_name", "node_labels", "same_node",
            "duration_hours", "reason", "priority", "state", "queue_position", "borrowed",
            "decided_by", "decided_at", "decision_comment", "escalated_at", "queued_at",
            "placed_at", "expires_at", "ended_at", "extension_hours", "created", "allocations",
        ]  # fmt: skip
        read_only_fields = [
            "priority", "state", "borrowed", "decided_at", "decision_comment", "escalated_at",
            "queued_at", "placed_at", "expires_at", "ended_at", "extension_hours", "created",
        ]  # fmt: skip

    def get_queue_position(self, req: GpuRequest) -> int | None:
        return queue_position(req)

    @extend_schema_field(AllocationBriefSerializer(many=True))
    def get_allocations(self, req: GpuRequest) -> list[dict]:
        if not req.lease_id:
            return []
        return AllocationBriefSerializer(req.lease.allocations.all(), many=True).data


@extend_schema_serializer(examples=COMMENT_EXAMPLES)
class CommentSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, allow_blank=True, default="")


@extend_schema_serializer(examples=EXTEND_EXAMPLES)
class ExtendSerializer(serializers.Serializer):
    hours = serializers.IntegerField(min_value=1, max_value=MAX_HOURS)


@extend_schema_serializer(examples=RESIZE_EXAMPLES)
class ResizeSerializer(serializers.Serializer):
    compute_pct = serializers.IntegerField(min_value=1, max_value=100)
    memory_mib = serializers.IntegerField(min_value=1, max_value=10_000_000)


class WaitSerializer(serializers.Serializer):
    wait = serializers.IntegerField(min_value=0, max_value=MAX_WAIT_SECONDS, default=0)
