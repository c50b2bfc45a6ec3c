"""/api/v1/idle-report/, /api/v1/idle-cards/, /api/v1/reclaim-warnings/,
/api/v1/reclaim-exemptions/ and /api/v1/accounting/: the same rows and rules as the
pages (``reports.report``, ``reports.permissions``)."""

from __future__ import annotations

from dataclasses import asdict

from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from audit.interface import request_address
from pools.permissions import visible_leases
from portal.api_views import ApiGenericViewSet, ApiReadOnlyModelViewSet, ApiView
from reports import accounting, permissions, report, services
from reports.api.docs import ACCOUNTING_EXAMPLES
from reports.api.serializers import (
    AllocationIdleAnswerSerializer,
    AllocationIdleSerializer,
    AppealDecisionSerializer,
    AppealSerializer,
    ExemptionSerializer,
    IdleCardSerializer,
    ReclaimWarningSerializer,
    call_service,
)
from reports.filtersets import AllocationIdleFilterSet
from reports.models import Exemption, ReclaimWarning


def _visible(queryset, user):
    lease_ids = permissions.visible_lease_ids(user)
    return queryset if lease_ids is None else queryset.filter(lease_id__in=lease_ids)


@extend_schema_view(
    list=extend_schema(responses=AllocationIdleAnswerSerializer(many=True)),
    retrieve=extend_schema(responses=AllocationIdleAnswerSerializer),
)
class AllocationIdleViewSet(ApiReadOnlyModelViewSet):
    """Live allocations with the last scan's verdict: idle or busy, time idle, GPU-hours
    wasted, p95 use and right-sizing advice. Members see their tenants' rows only."""

    serializer_class = AllocationIdleSerializer
    filterset_class = AllocationIdleFilterSet
    lookup_field = "allocation_id"

    def get_queryset(self):
        return report.visible_rows(self.request.user)

    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        return report.decorate(page) if page is not None else None


class IdleCardViewSet(ApiReadOnlyModelViewSet):
    """Physical cards with no allocation, allocated and unused, or used outside any
    allocation; for those who see the whole fleet."""

    serializer_class = IdleCardSerializer
    lookup_field = "gpu_id"

    def get_queryset(self):
        return report.visible_cards(self.request.user)


class ReclaimWarningViewSet(ApiReadOnlyModelViewSet):
    """Warnings sent to owners of idle leases; the owner appeals, an approver decides."""

    serializer_class = ReclaimWarningSerializer

    def get_queryset(self):
        return _visible(ReclaimWarning.objects.select_related("lease"), self.request.user)

    @extend_schema(summary=_("Appeal a reclaim warning"), request=AppealSerializer,
                   responses=ReclaimWarningSerializer)  # fmt: skip
    @action(detail=True, methods=["post"])
    def appeal(self, request: Request, pk: str | None = None) -> Response:
        warning = self.get_object()
        body = AppealSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        warning = call_service(
            services.appeal,
            warning.pk,
            request.user,
            reason=reason,
            address=request_address(request),
        )
        return Response(ReclaimWarningSerializer(warning).data)

    @extend_schema(summary=_("Decide an appeal"), request=AppealDecisionSerializer,
                   responses=ReclaimWarningSerializer)  # fmt: skip
    @action(detail=True, methods=["post"])
    def decide(self, request: Request, pk: str | None = None) -> Response:
        warning = self.get_object()
        body = AppealDecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        warning = call_service(
            services.decide_appeal, warning.pk, request.user, grant=data["grant"],
            comment=data.get("comment", ""), until=data.get("until"),
            address=request_address(request),
        )  # fmt: skip
        return Response(ReclaimWarningSerializer(warning).data)


class ExemptionViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.DestroyModelMixin, ApiGenericViewSet,
):  # fmt: skip
    """Leases kept out of reclaim until a date, for a reason. Deleting one ends it now."""

    serializer_class = ExemptionSerializer

    def get_queryset(self):
        return _visible(Exemption.objects.all(), self.request.user)

    def create(self, request: Request, *args, **kwargs) -> Response:
        body = ExemptionSerializer(data=request.data)
        body.fields["lease"].queryset = visible_leases(request.user)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        exemption = call_service(
            services.add_exemption, data["lease"].pk, request.user, reason=data["reason"],
            ends_at=data["ends_at"], address=request_address(request),
        )  # fmt: skip
        return Response(ExemptionSerializer(exemption).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: Exemption) -> None:
        call_service(services.end_exemption, instance.pk, self.request.user,
                     address=request_address(self.request))  # fmt: skip


class AccountingView(ApiView):
    """The month's GPU-hours held and used per tenant, user and pool, per day; vGPU
    units; chargeback cost with idle time apart; queue waits."""

    @extend_schema(
        summary=_("Get a month's accounting"),
        parameters=[OpenApiParameter("month", str, description="YYYY-MM (default: now)")],
        responses=OpenApiTypes.OBJECT,
        examples=ACCOUNTING_EXAMPLES,
    )
    def get(self, request: Request) -> Response:
        month = accounting.parse_month(request.query_params.get("month"))
        data = accounting.monthly(month, request.user)

        def line(item: accounting.Line) -> dict:
            out = asdict(item)
            out["compute_pct_hours"] = item.compute_pct_hours
            return out

        return Response({
            "month": month.strftime("%Y-%m"), "currency": data.currency, "days": data.days,
            "lines": [line(x) for x in data.lines],
            "tenants": [line(x) for x in data.by_tenant.values()],
            "pools": [line(x) for x in data.by_pool.values()],
            "total": line(data.total), "queue_waits": data.waits,
            "advice": [report.as_dict(r) for r in data.advice],
        })  # fmt: skip
