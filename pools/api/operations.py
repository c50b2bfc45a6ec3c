"""Operations on pool nodes and cards: drain a node, clear a card's cordon.

``/api/v1/nodes/`` is the inventory's (agents); these act on what pools hold on those
nodes and cards, so they live under pools' own routes and take ``pools.change_pool``.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.choices import NodeSource
from agents.models import Node
from pools.failover import clear_cordon, drain_node
from pools.models import PoolCard
from portal.api_errors import Conflict
from portal.api_schema import ERROR
from portal.api_views import ApiView
from portal.security import client_ip

CHANGE_POOL = "pools.change_pool"


class PoolOperationPermissions(permissions.IsAuthenticated):
    message = _("Changing pools needs the pools.change_pool permission.")

    def has_permission(self, request: Request, view) -> bool:
        return super().has_permission(request, view) and request.user.has_perm(CHANGE_POOL)


class PoolCardOperationSerializer(serializers.ModelSerializer):
    cordoned = serializers.BooleanField(read_only=True)

    class Meta:
        model = PoolCard
        fields = ["id", "pool", "gpu", "cordoned", "cordoned_at", "cordon_reason", "slices"]
        read_only_fields = fields


_DRAIN_ANSWER = inline_serializer(
    "PoolNodeDrainResult",
    {
        "node": serializers.IntegerField(),
        "state": serializers.CharField(),
        "moved": serializers.IntegerField(),
        "stranded": serializers.IntegerField(),
    },
)


class PoolNodeDrainView(APIView):
    # A developer note, not published: drain is idempotent; a second call moves what
    # is left (slices placed meanwhile cannot be, placement needs an online node).
    # So it takes no Idempotency-Key: running it under one (a single transaction around
    # the view) would hold every card it moves a slice to locked until the last move,
    # where each move now commits alone.
    permission_classes = [PoolOperationPermissions]

    @extend_schema(
        summary=_("Drain a node"),
        description="Mark the node draining (no new slices) and move its slices to healthy "
        "cards of their pools; those that fit nowhere are stranded and retried later.",
        request=None,
        responses={200: _DRAIN_ANSWER},
    )
    def post(self, request: Request, pk: int) -> Response:
        node = get_object_or_404(Node, pk=pk, source=NodeSource.AGENT)
        result = drain_node(node, request.user, address=client_ip(request))
        return Response(
            {"node": node.pk, "state": node.state, "moved": len(result.moved),
             "stranded": len(result.stranded)}
        )  # fmt: skip


class PoolCardClearCordonView(ApiView):
    permission_classes = [PoolOperationPermissions]

    @extend_schema(
        summary=_("Clear a card's cordon"),
        description="Let a cordoned card take new slices again. 409 when it is not cordoned.",
        request=None,
        responses={200: PoolCardOperationSerializer, 409: ERROR},
    )
    def post(self, request: Request, pk: int) -> Response:
        card = get_object_or_404(PoolCard, pk=pk)
        if not clear_cordon(card, request.user, address=client_ip(request)):
            raise Conflict(_("This card is not cordoned."))
        return Response(PoolCardOperationSerializer(card).data)
