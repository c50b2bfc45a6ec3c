from django.db.models import Count
from drf_spectacular.utils import extend_schema, extend_schema_view

from agents import node_audit, registration
from agents.api.docs import NODE_OPERATIONS
from agents.api.node_registration import NodeRegistrationMixin
from agents.api.serializers import NodeSerializer
from agents.filtersets import NodeFilterSet
from agents.models import Node
from agents.permissions import NodePermissions
from portal.api_views import ApiModelViewSet


@extend_schema_view(
    **{name: extend_schema(description=text) for name, text in NODE_OPERATIONS.items()}
)
class NodeViewSet(NodeRegistrationMixin, ApiModelViewSet):
    queryset = Node.objects.annotate(gpu_count=Count("gpus")).order_by("name")
    serializer_class = NodeSerializer
    filterset_class = NodeFilterSet
    permission_classes = [NodePermissions]

    def perform_destroy(self, instance: Node) -> None:
        registration.delete_node(instance.pk, **node_audit.who(self.request))
