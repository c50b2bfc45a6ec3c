from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, permissions, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from clusters import services
from clusters.api.docs import CLUSTER_OPERATIONS
from clusters.api.serializers import ClusterSerializer, NamespaceMappingSerializer
from clusters.models import Cluster
from portal.api_views import ApiGenericViewSet
from quotas.permissions import is_platform_admin


class PlatformAdminOnly(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return is_platform_admin(request.user)


@extend_schema_view(
    **{name: extend_schema(description=text) for name, text in CLUSTER_OPERATIONS.items()}
)
class ClusterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                     mixins.CreateModelMixin, ApiGenericViewSet):  # fmt: skip
    queryset = Cluster.objects.select_related("pool").prefetch_related("namespaces")
    serializer_class = ClusterSerializer
    permission_classes = [permissions.IsAuthenticated, PlatformAdminOnly]

    def perform_create(self, serializer: ClusterSerializer) -> None:
        data = dict(serializer.validated_data)
        try:
            serializer.instance = services.register_cluster(
                actor=self.request.user, token=data.pop("token"), **data
            )
        except ValidationError as exc:
            raise ApiValidationError(exc.message_dict) from exc

    @extend_schema(summary=_("Map a namespace of a cluster"), request=NamespaceMappingSerializer,
                   responses={201: NamespaceMappingSerializer})  # fmt: skip
    @action(detail=True, methods=["post"])
    def namespaces(self, request: Request, pk=None) -> Response:
        cluster = self.get_object()
        body = NamespaceMappingSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            mapping = services.map_namespace(cluster, actor=request.user, **body.validated_data)
        except ValidationError as exc:
            raise ApiValidationError(exc.message_dict) from exc
        return Response(NamespaceMappingSerializer(mapping).data, status=status.HTTP_201_CREATED)
