from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, permissions, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from clusters import services
from clusters.api.docs import CLUSTER_OPERATIONS
from clusters.api.serializers import (
    ClusterSerializer,
    ClusterUpdateSerializer,
    NamespaceMappingSerializer,
)
from clusters.models import Cluster, NamespaceMapping
from portal.api_errors import Conflict
from portal.api_schema import ERROR
from portal.api_views import ApiGenericViewSet
from quotas.permissions import is_platform_admin


def _busy(exc: services.PassBusy) -> exceptions.APIException:
    """503 with Retry-After, as a create answers while a gate pass holds the cluster."""
    answer = exceptions.APIException(exc.messages[0], code="cluster_unavailable")
    answer.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    answer.wait = 2
    return answer


class PlatformAdminOnly(permissions.BasePermission):
    def has_permission(self, request: Request, view) -> bool:
        return is_platform_admin(request.user)


@extend_schema_view(
    **{name: extend_schema(description=text) for name, text in CLUSTER_OPERATIONS.items()
       if name != "destroy"},
    destroy=extend_schema(description=CLUSTER_OPERATIONS["destroy"],
                          responses={204: None, 409: ERROR}),
)  # fmt: skip
class ClusterViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                     mixins.CreateModelMixin, mixins.UpdateModelMixin,
                     mixins.DestroyModelMixin, ApiGenericViewSet):  # fmt: skip
    queryset = Cluster.objects.select_related("pool").prefetch_related("namespaces")
    serializer_class = ClusterSerializer
    permission_classes = [permissions.IsAuthenticated, PlatformAdminOnly]

    def get_serializer_class(self):
        if self.action in ("update", "partial_update"):
            return ClusterUpdateSerializer
        return ClusterSerializer

    def perform_update(self, serializer: ClusterUpdateSerializer) -> None:
        data = dict(serializer.validated_data)
        try:
            serializer.instance = services.update_cluster(
                serializer.instance, actor=self.request.user, token=data.pop("token", ""), **data
            )
        except services.PassBusy as exc:
            raise _busy(exc) from exc
        except ValidationError as exc:
            raise ApiValidationError(exc.message_dict) from exc

    def perform_destroy(self, instance: Cluster) -> None:
        try:
            services.delete_cluster(instance, actor=self.request.user)
        except services.PassBusy as exc:
            raise _busy(exc) from exc
        except ValidationError as exc:
            raise Conflict(exc.messages[0]) from exc

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

    @extend_schema(summary=_("Remove a namespace mapping"), request=None,
                   responses={204: None, 409: ERROR},
                   parameters=[OpenApiParameter("namespace", str, OpenApiParameter.PATH,
                                                description=_("A mapped namespace."))])  # fmt: skip
    @action(detail=True, methods=["delete"], url_path=r"namespaces/(?P<namespace>[^/.]+)")
    def unmap_namespace(self, request: Request, pk=None, namespace: str = "") -> Response:
        cluster = self.get_object()
        try:
            services.unmap_namespace(cluster, actor=request.user, namespace=namespace)
        except NamespaceMapping.DoesNotExist as exc:
            raise NotFound() from exc
        except services.PassBusy as exc:
            raise _busy(exc) from exc
        except ValidationError as exc:
            raise Conflict(exc.messages[0]) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)
