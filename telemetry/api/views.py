from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response

from agents.filtersets import GPUFilterSet
from agents.models import GPU, Node
from portal.api_views import ApiReadOnlyModelViewSet, ApiView
from telemetry import history, readings
from telemetry.api.docs import GPU_HISTORY_EXAMPLES, NODE_HISTORY_EXAMPLES
from telemetry.api.serializers import GPUSerializer
from telemetry.permissions import ReadingPermissions, visible_owners

RANGE_PARAMETER = OpenApiParameter(
    "range", OpenApiTypes.STR, enum=list(history.RANGES), default="1h",
    description="How far back: 1h and 24h come from 1-minute rollups, 7d from 1-hour ones.",
)  # fmt: skip


def _history(gpu_ids: list[int], request: Request) -> Response:
    """The cards' history; process owners only as far as the caller may see them."""
    owners = visible_owners(request.user, gpu_ids)
    try:
        data = history.gpu_history(gpu_ids, request.query_params.get("range", "1h"), owners)
    except history.BadRange as exc:
        raise ValidationError({"range": str(exc)}) from None
    return Response(data)


class NodeHistoryView(ApiView):
    permission_classes = [ReadingPermissions]

    @extend_schema(
        operation_id="nodes_history_retrieve",
        summary=_("Get a node's history"),
        parameters=[RANGE_PARAMETER],
        responses=OpenApiTypes.OBJECT,
        examples=NODE_HISTORY_EXAMPLES,
    )
    def get(self, request: Request, pk: int) -> Response:
        """The node's cards together: utilization averaged, memory and power summed."""
        node = get_object_or_404(Node, pk=pk)
        return _history(list(node.gpus.values_list("pk", flat=True)), request)


@extend_schema(
    description=_(
        "Physical GPU cards: their node, index, UUID, model, memory and health, with the "
        "latest reading (utilization, memory used, temperature, power, clocks). Every "
        "signed-in user reads the fleet."
    )
)
class GPUViewSet(ApiReadOnlyModelViewSet):
    queryset = GPU.objects.select_related("node").order_by("node__name", "index")
    serializer_class = GPUSerializer
    filterset_class = GPUFilterSet
    permission_classes = [ReadingPermissions]

    def get_serializer(self, *args, **kwargs):
        # Read the cache once per page, not once per GPU.
        instances = args[0] if args else []
        if isinstance(instances, GPU):
            instances = [instances]
        kwargs.setdefault("context", self.get_serializer_context())
        kwargs["context"]["latest"] = readings.latest_for({g.node_id for g in instances})
        return super().get_serializer(*args, **kwargs)

    @extend_schema(summary=_("Get a GPU's history"), parameters=[RANGE_PARAMETER],
                   responses=OpenApiTypes.OBJECT, examples=GPU_HISTORY_EXAMPLES)  # fmt: skip
    @action(detail=True)
    def history(self, request: Request, pk: str | None = None) -> Response:
        """One card's utilization, memory, power and temperature, with its process owners
        for those allowed to see them (an empty list for others)."""
        return _history([self.get_object().pk], request)
