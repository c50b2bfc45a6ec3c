"""/api/v1/tenants/, /api/v1/memberships/, /api/v1/quotas/ and a tenant's usage.

Thin views: what each caller may read is the queryset (``quotas.permissions``: others'
tenants are 404), who may write is ``TenantPermissions`` and the services again.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from audit.interface import request_address
from portal.api_views import ApiModelViewSet
from quotas import permissions
from quotas.models import Membership, Quota
from quotas.tenancy import services
from quotas.tenancy.api.serializers import (
    MembershipSerializer,
    QuotaSerializer,
    QuotaUsageSerializer,
    TenantSerializer,
    call_service,
)
from quotas.tenancy.filtersets import MembershipFilterSet, QuotaFilterSet, TenantFilterSet
from quotas.tenancy.permissions import TenantPermissions
from quotas.tenancy.usage import quota_usage

# The operations' descriptions in the schema, in the reader's language (?lang=zh-hans).
TENANTS = _(
    "Tenants (teams). Members read their own tenants, platform admins all of them; platform "
    "admins create, change and delete them. Another tenant is 404."
)
MEMBERSHIPS = _(
    "Who belongs to a tenant, in which role (admin, approver, member). Members read their "
    "tenants' memberships; the tenant's admins and platform admins add, change and remove "
    "them. The last admin of a tenant cannot be removed or demoted."
)
QUOTAS = _(
    "A tenant's quota in a pool: guarantee and limit per dimension (vGPUs, compute share, "
    "memory MiB, GPU-hours), per-member caps, and the auto-approval policy. Members read their "
    "tenants' quotas; platform admins write them. A tenant may use only the pools it has a "
    "quota in."
)
USAGE = _(
    "Per pool: what the tenant holds now and its GPU-hours this budget period, against its "
    "guarantee and limit, and each member's share. GPU-hours: a whole card counts 1 per "
    "hour, a slice compute_pct/100 per hour."
)


@extend_schema(description=TENANTS)
class TenantViewSet(ApiModelViewSet):
    serializer_class = TenantSerializer
    filterset_class = TenantFilterSet
    permission_classes = [TenantPermissions]

    def get_queryset(self):
        return permissions.visible_tenants(self.request.user).order_by("name")

    def get_serializer_context(self) -> dict:
        context = super().get_serializer_context()
        # The caller's roles, read once per page rather than once per tenant.
        context["roles"] = dict(
            Membership.objects.of(self.request.user).values_list("tenant_id", "role")
        )
        return context

    def perform_destroy(self, instance) -> None:
        call_service(
            services.delete_tenant,
            instance.pk,
            self.request.user,
            address=request_address(self.request),
        )

    @extend_schema(summary=_("List a tenant's quota usage"),
                   responses=QuotaUsageSerializer(many=True), description=USAGE)  # fmt: skip
    @action(detail=True, methods=["get"])
    def usage(self, request: Request, pk: str | None = None) -> Response:
        tenant = self.get_object()
        usages = quota_usage([tenant.pk], members=True)
        ids = {uid for usage in usages for uid in usage.members}
        names = dict(get_user_model().objects.filter(pk__in=ids).values_list("pk", "username"))
        serializer = QuotaUsageSerializer(usages, many=True, context={"usernames": names})
        return Response(serializer.data)


@extend_schema(description=MEMBERSHIPS)
class MembershipViewSet(ApiModelViewSet):
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilterSet
    permission_classes = [TenantPermissions]
    members_may_write = True  # tenant admins: checked per tenant by the serializer and services

    def get_queryset(self):
        tenants = permissions.visible_tenants(self.request.user).values("pk")
        return (
            Membership.objects.filter(tenant_id__in=tenants)
            .select_related("user", "tenant")
            .order_by("tenant__name", "user__username")
        )

    def perform_destroy(self, instance: Membership) -> None:
        call_service(
            services.remove_member,
            instance.pk,
            self.request.user,
            address=request_address(self.request),
        )


@extend_schema(description=QUOTAS)
class QuotaViewSet(ApiModelViewSet):
    serializer_class = QuotaSerializer
    filterset_class = QuotaFilterSet
    permission_classes = [TenantPermissions]

    def get_queryset(self):
        tenants = permissions.visible_tenants(self.request.user).values("pk")
        return (
            Quota.objects.filter(tenant_id__in=tenants)
            .select_related("tenant", "pool")
            .order_by("tenant__name", "pool__name")
        )

    def perform_destroy(self, instance: Quota) -> None:
        call_service(
            services.delete_quota,
            instance.pk,
            self.request.user,
            address=request_address(self.request),
        )
