"""GPU requests over the REST API: ask, list and read what one may see, decide, release,
extend, resize. The same services and rules as the pages: a request of another tenant is
404, an action one may not take 403, bad input 400 with field errors and nothing changed.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Prefetch
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from audit.interface import request_address
from pools.models import Allocation, Pool
from portal.api_views import ApiGenericViewSet
from quotas import permissions
from quotas.choices import RequestState
from quotas.models import GpuRequest, Tenant
from quotas.requests import lifecycle
from quotas.requests.api.schema import CREATE_EXAMPLES, READ_EXAMPLES, WAIT_PARAMETER
from quotas.requests.api.wait import MAX_WAIT_SECONDS, wait_while_waiting
from quotas.requests.services import create_request, decide, queue_position
from quotas.requests.views import allocation_url

MAX_HOURS = 24 * 366


class AllocationBriefSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="gpu.node.name", default="", read_only=True)
    gpu_uuid = serializers.CharField(source="gpu.uuid", default="", read_only=True)
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


class GpuRequestSerializer(serializers.ModelSerializer):
    """A GPU request; quotas.requests.services.create_request writes it and holds the rules."""

    tenant = serializers.PrimaryKeyRelatedField(queryset=Tenant.objects.all())
    pool = serializers.PrimaryKeyRelatedField(queryset=Pool.objects.all())
    count = serializers.IntegerField(min_value=1, max_value=64, default=1)
    whole_card = serializers.BooleanField(default=False)
    compute_pct = serializers.IntegerField(min_value=1, max_value=100, default=100)
    memory_mib = serializers.IntegerField(min_value=1, max_value=10_000_000, default=1024)
    gpu_model = serializers.CharField(max_length=128, allow_blank=True, default="")
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
            "memory_mib", "gpu_model", "node_name", "node_labels", "same_node",
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

    def get_allocations(self, req: GpuRequest) -> list[dict]:
        if not req.lease_id:
            return []
        return AllocationBriefSerializer(req.lease.allocations.all(), many=True).data


class CommentSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, allow_blank=True, default="")


class ExtendSerializer(serializers.Serializer):
    hours = serializers.IntegerField(min_value=1, max_value=MAX_HOURS)


class ResizeSerializer(serializers.Serializer):
    compute_pct = serializers.IntegerField(min_value=1, max_value=100)
    memory_mib = serializers.IntegerField(min_value=1, max_value=10_000_000)


class GpuRequestFilterSet(filters.FilterSet):
    state = filters.MultipleChoiceFilter(choices=RequestState.choices)
    mine = filters.BooleanFilter(method="filter_mine", label="Only my own requests")
    waiting_for_me = filters.BooleanFilter(
        method="filter_waiting", label="Only requests I may decide now"
    )

    class Meta:
        model = GpuRequest
        fields = ["state", "tenant", "pool"]

    def filter_mine(self, queryset, name, value):
        return queryset.filter(requester=self.request.user) if value else queryset

    def filter_waiting(self, queryset, name, value):
        if not value:
            return queryset
        return queryset & permissions.decidable_requests(self.request.user)


def _drf_error(exc: DjangoValidationError) -> ValidationError:
    if hasattr(exc, "error_dict"):
        return ValidationError(exc.message_dict)
    return ValidationError({"non_field_errors": exc.messages})


class WaitSerializer(serializers.Serializer):
    wait = serializers.IntegerField(min_value=0, max_value=MAX_WAIT_SECONDS, default=0)


class GpuRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    ApiGenericViewSet,
):  # fmt: skip
    """GPU requests: ask for vGPUs in a pool of one of your tenants, follow them through
    approval and placement, and release them. Any POST may carry an Idempotency-Key header:
    a retry with the same key and body gets the first answer back instead of running again.
    """

    serializer_class = GpuRequestSerializer
    filterset_class = GpuRequestFilterSet

    def get_queryset(self):
        allocations = Allocation.objects.select_related("gpu__node")
        return (
            permissions.visible_requests(self.request.user)
            .select_related("lease")
            .prefetch_related(Prefetch("lease__allocations", queryset=allocations))
            .order_by("-created", "-pk")
        )

    def _address(self) -> str | None:
        return request_address(self.request)

    def _run(self, call, *, status_code: int = status.HTTP_200_OK) -> Response:
        try:
            req = call()
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        except DjangoValidationError as exc:
            raise _drf_error(exc) from exc
        fresh = self.get_queryset().get(pk=req.pk)
        return Response(self.get_serializer(fresh).data, status=status_code)

    @extend_schema(parameters=[WAIT_PARAMETER], examples=READ_EXAMPLES)
    def retrieve(self, request: Request, *args, **kwargs) -> Response:
        """Read a request. With wait, first wait until it is no longer pending or approved."""
        params = WaitSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        req = self.get_object()
        if params.validated_data["wait"]:
            wait_while_waiting(req, params.validated_data["wait"])
            req = self.get_object()
        return Response(self.get_serializer(req).data)

    @extend_schema(examples=CREATE_EXAMPLES)
    def create(self, request: Request, *args, **kwargs) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        return self._run(
            lambda: create_request(request.user, address=self._address(), **data),
            status_code=status.HTTP_201_CREATED,
        )

    def _comment(self) -> str:
        serializer = CommentSerializer(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data["comment"]

    @extend_schema(request=CommentSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: decide(
                req.pk, request.user, approve=True, comment=comment, address=self._address()
            )
        )

    @extend_schema(request=CommentSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: decide(
                req.pk, request.user, approve=False, comment=comment, address=self._address()
            )
        )

    @extend_schema(request=None, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk=None) -> Response:
        """Release a placed request, or cancel one still waiting."""
        req = self.get_object()
        return self._run(
            lambda: lifecycle.release_request(req.pk, request.user, address=self._address())
        )

    @extend_schema(request=ExtendSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk=None) -> Response:
        req = self.get_object()
        serializer = ExtendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        hours = serializer.validated_data["hours"]
        return self._run(
            lambda: lifecycle.extend_request(req.pk, request.user, hours, address=self._address())
        )

    @extend_schema(request=ResizeSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"])
    def resize(self, request: Request, pk=None) -> Response:
        req = self.get_object()
        serializer = ResizeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        size = serializer.validated_data
        return self._run(
            lambda: lifecycle.resize_request(req.pk, request.user, address=self._address(), **size)
        )

    @extend_schema(request=CommentSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"], url_path="approve-extension")
    def approve_extension(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: lifecycle.decide_extension(
                req.pk, request.user, approve=True, comment=comment, address=self._address()
            )
        )

    @extend_schema(request=CommentSerializer, responses=GpuRequestSerializer)
    @action(detail=True, methods=["post"], url_path="reject-extension")
    def reject_extension(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: lifecycle.decide_extension(
                req.pk, request.user, approve=False, comment=comment, address=self._address()
            )
        )
