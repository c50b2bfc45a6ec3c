from django.db.models import Prefetch
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from alerts import services
from alerts.api.serializers import ChannelSerializer, DeliverySerializer
from alerts.filtersets import ChannelFilterSet
from alerts.models import Delivery, DeliveryAttempt
from alerts.permissions import visible_channels
from audit.interface import request_address
from portal.api_views import ApiModelViewSet

DELIVERIES_SHOWN = 50


class ChannelViewSet(ApiModelViewSet):
    """Alert channels: your own and your tenants' (as their admin); all for the platform
    admin. Another's channel is 404."""

    serializer_class = ChannelSerializer
    filterset_class = ChannelFilterSet

    def get_queryset(self):
        return visible_channels(self.request.user).order_by("name", "pk")

    def perform_destroy(self, instance) -> None:
        services.delete_channel(
            instance.pk, actor=self.request.user, address=request_address(self.request)
        )

    @extend_schema(summary=_("Send a test message"), request=None,
                   responses={202: DeliverySerializer})  # fmt: skip
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str | None = None) -> Response:
        """Queue a test message to the channel; its attempts are listed under deliveries."""
        channel = self.get_object()
        delivery_id = services.send_test(
            channel.pk, actor=request.user, address=request_address(request)
        )
        delivery = Delivery.objects.get(pk=delivery_id)
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(summary=_("List a channel's deliveries"),
                   responses={200: DeliverySerializer(many=True)})  # fmt: skip
    # Its latest DELIVERIES_SHOWN, as one list: neither pages nor the channel list's filters.
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def deliveries(self, request: Request, pk: str | None = None) -> Response:
        """The channel's latest deliveries, each with every attempt."""
        channel = self.get_object()
        rows = channel.deliveries.prefetch_related(
            Prefetch("attempt_log", queryset=DeliveryAttempt.objects.order_by("number"))
        )[:DELIVERIES_SHOWN]
        return Response(DeliverySerializer(rows, many=True).data)
