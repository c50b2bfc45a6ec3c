"""GPU requests over the REST API: ask, list and read what one may see, decide, release,
extend, resize. The same services and rules as the pages: a request of another tenant is
404, an action one may not take 403, bad input 400 with field errors and nothing changed.
"""

from __future__ import annotations

from django.db.models import Prefetch, prefetch_related_objects
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from audit.interface import request_address
from pools.models import Allocation
from portal.api_views import ApiGenericViewSet
from quotas.requests import lifecycle
from quotas.requests.api.docs import CREATE_EXAMPLES, READ_EXAMPLES, WAIT_PARAMETER
from quotas.requests.api.serializers import (
    CommentSerializer,
    ExtendSerializer,
    GpuRequestSerializer,
    ResizeSerializer,
    WaitSerializer,
)
from quotas.requests.api.wait import wait_while_waiting
from quotas.requests.filtersets import GpuRequestFilterSet
from quotas.requests.permissions import visible_requests
from quotas.requests.services import create_request, decide


def _allocations() -> Prefetch:
    return Prefetch("lease__allocations", queryset=Allocation.objects.select_related("gpu__node"))


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
        return (
            visible_requests(self.request.user)
            .select_related("lease")
            .prefetch_related(_allocations())
            .order_by("-created", "-pk")
        )

    def _address(self) -> str | None:
        return request_address(self.request)

    def _run(self, call, *, status_code: int = status.HTTP_200_OK) -> Response:
        try:
            req = call()
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
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
        req = create_request(request.user, address=self._address(), **data)
        # Answered from the rows this call just wrote (its tenant, pool, requester and
        # lease are in hand; the requester sees their own request): only the allocations
        # are read, not the request again through the visibility check.
        prefetch_related_objects([req], _allocations())
        return Response(self.get_serializer(req).data, status=status.HTTP_201_CREATED)

    def _comment(self) -> str:
        serializer = CommentSerializer(data=self.request.data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data["comment"]

    @extend_schema(summary=_("Approve a GPU request"), request=CommentSerializer,
                   responses=GpuRequestSerializer)  # fmt: skip
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: decide(
                req.pk, request.user, approve=True, comment=comment, address=self._address()
            )
        )

    @extend_schema(summary=_("Reject a GPU request"), request=CommentSerializer,
                   responses=GpuRequestSerializer)  # fmt: skip
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: decide(
                req.pk, request.user, approve=False, comment=comment, address=self._address()
            )
        )

    @extend_schema(summary=_("Release a GPU request"), request=None,
                   responses=GpuRequestSerializer)  # fmt: skip
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk=None) -> Response:
        """Release a placed request, or cancel one still waiting."""
        req = self.get_object()
        return self._run(
            lambda: lifecycle.release_request(req.pk, request.user, address=self._address())
        )

    @extend_schema(summary=_("Extend a GPU request"), request=ExtendSerializer,
                   responses=GpuRequestSerializer)  # fmt: skip
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk=None) -> Response:
        req = self.get_object()
        serializer = ExtendSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        hours = serializer.validated_data["hours"]
        return self._run(
            lambda: lifecycle.extend_request(req.pk, request.user, hours, address=self._address())
        )

    @extend_schema(summary=_("Resize a GPU request"), request=ResizeSerializer,
                   responses=GpuRequestSerializer)  # fmt: skip
    @action(detail=True, methods=["post"])
    def resize(self, request: Request, pk=None) -> Response:
        req = self.get_object()
        serializer = ResizeSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        size = serializer.validated_data
        return self._run(
            lambda: lifecycle.resize_request(req.pk, request.user, address=self._address(), **size)
        )

    @extend_schema(summary=_("Approve an extension"), request=CommentSerializer,
                   responses=GpuRequestSerializer)  # fmt: skip
    @action(detail=True, methods=["post"], url_path="approve-extension")
    def approve_extension(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: lifecycle.decide_extension(
                req.pk, request.user, approve=True, comment=comment, address=self._address()
            )
        )

    @extend_schema(summary=_("Reject an extension"), request=CommentSerializer,
                   responses=GpuRequestSerializer)  # fmt: skip
    @action(detail=True, methods=["post"], url_path="reject-extension")
    def reject_extension(self, request: Request, pk=None) -> Response:
        req, comment = self.get_object(), self._comment()
        return self._run(
            lambda: lifecycle.decide_extension(
                req.pk, request.user, approve=False, comment=comment, address=self._address()
            )
        )
