from django.db.models import Count
from django.utils.translation import gettext_lazy as _
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.filters import OrderingFilter
from rest_framework.request import Request
from rest_framework.response import Response

from pools import capacity, configuration
from pools.api.docs import (
    ALLOCATION_EXAMPLES,
    ALLOCATION_OPERATIONS,
    CAPACITY_EXAMPLES,
    CARDS_CHANGED_EXAMPLES,
    POOL_CARD_OPERATIONS,
    POOL_OPERATIONS,
)
from pools.api.serializers import (
    AllocationSerializer,
    PoolCardsChangeSerializer,
    PoolCardSerializer,
    PoolSerializer,
)
from pools.filtersets import AllocationFilterSet, PoolCardFilterSet, PoolFilterSet
from pools.models import Pool, PoolCard
from pools.permissions import (
    AllocationPermissions,
    PoolPermissions,
    PoolReadPermissions,
    visible_allocations,
)
from portal.api_errors import Conflict
from portal.api_schema import ERROR
from portal.api_views import ApiModelViewSet, ApiReadOnlyModelViewSet
from portal.security import client_ip

FILTERS = [DjangoFilterBackend, OrderingFilter]


def _documented(operations: dict):
    return extend_schema_view(
        **{name: extend_schema(description=text) for name, text in operations.items()}
    )


@_documented(POOL_OPERATIONS)
class PoolViewSet(ApiModelViewSet):
    queryset = Pool.objects.annotate(card_count=Count("cards")).order_by("name")
    serializer_class = PoolSerializer
    filterset_class = PoolFilterSet
    filter_backends = FILTERS
    ordering_fields = ["name", "slug", "created", "updated"]
    permission_classes = [PoolPermissions]

    @extend_schema(responses={204: None, 409: ERROR})
    def destroy(self, request: Request, *args, **kwargs) -> Response:
        pool = self.get_object()
        try:
            configuration.delete_pool(pool.pk, actor=request.user, address=client_ip(request))
        except configuration.PoolInUse as exc:
            raise Conflict(str(exc)) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _change_cards(self, request: Request, change) -> Response:
        pool = self.get_object()
        body = PoolCardsChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        count = change(pool.pk, body.validated_data["gpus"], actor=request.user,
                       address=client_ip(request))  # fmt: skip
        return Response({"changed": count})

    @extend_schema(summary=_("Add cards to a pool"), request=PoolCardsChangeSerializer,
                   responses=OpenApiTypes.OBJECT, examples=CARDS_CHANGED_EXAMPLES)  # fmt: skip
    @action(detail=True, methods=["post"], url_path="cards/add")
    def add_cards(self, request: Request, pk=None) -> Response:
        return self._change_cards(request, configuration.add_pool_cards)

    @extend_schema(summary=_("Take cards out of a pool"), request=PoolCardsChangeSerializer,
                   responses=OpenApiTypes.OBJECT, examples=CARDS_CHANGED_EXAMPLES)  # fmt: skip
    @action(detail=True, methods=["post"], url_path="cards/remove")
    def remove_cards(self, request: Request, pk=None) -> Response:
        return self._change_cards(request, configuration.remove_pool_cards)

    @extend_schema(summary=_("List a pool's cards"), responses=PoolCardSerializer(many=True))
    @action(detail=True, methods=["get"])
    def cards(self, request: Request, pk=None) -> Response:
        pool = self.get_object()
        rows = PoolCard.objects.filter(pool=pool).select_related("gpu__node")
        page = self.paginate_queryset(rows.order_by("gpu__node__name", "gpu__index"))
        return self.get_paginated_response(PoolCardSerializer(page, many=True).data)

    @extend_schema(summary=_("Get a pool's capacity"), responses=OpenApiTypes.OBJECT,
                   examples=CAPACITY_EXAMPLES)  # fmt: skip
    @action(detail=True, methods=["get"])
    def capacity(self, request: Request, pk=None) -> Response:
        pool = self.get_object()
        return Response({
            **capacity.picture(pool, request.user), "usage": capacity.usage(pool.pk)
        })  # fmt: skip


@_documented(POOL_CARD_OPERATIONS)
class PoolCardViewSet(ApiReadOnlyModelViewSet):
    queryset = PoolCard.objects.select_related("gpu__node").order_by("pool_id", "gpu_id")
    serializer_class = PoolCardSerializer
    filterset_class = PoolCardFilterSet
    filter_backends = FILTERS
    ordering_fields = ["gpu", "slices", "compute_allocated", "memory_allocated_mib"]
    permission_classes = [PoolReadPermissions]


@extend_schema_view(retrieve=extend_schema(examples=ALLOCATION_EXAMPLES))
@_documented(ALLOCATION_OPERATIONS)
class AllocationViewSet(ApiReadOnlyModelViewSet):
    serializer_class = AllocationSerializer
    filterset_class = AllocationFilterSet
    filter_backends = FILTERS
    ordering_fields = ["id", "created", "placed_at", "compute_pct", "memory_mib"]
    permission_classes = [AllocationPermissions]

    def get_queryset(self):
        # Only the leases' the caller may see (pools.permissions.visible_allocations).
        return (
            visible_allocations(self.request.user)
            .select_related("lease__holder", "gpu__node")
            .order_by("-id")
        )
