from django.db.models import Count
from rest_framework import viewsets

from agents import readings
from agents.api.serializers import GPUSerializer, NodeSerializer
from agents.models import GPU, Node


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Node.objects.annotate(gpu_count=Count("gpus")).order_by("name")
    serializer_class = NodeSerializer


class GPUViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = GPU.objects.select_related("node").order_by("node__name", "index")
    serializer_class = GPUSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        params = self.request.query_params
        if node := params.get("node"):
            queryset = queryset.filter(node__name=node)
        if model := params.get("model"):
            queryset = queryset.filter(model=model)
        if health := params.get("health"):
            queryset = queryset.filter(health=health)
        return queryset

    def get_serializer(self, *args, **kwargs):
        # Read the cache once per page, not once per GPU.
        instances = args[0] if args else []
        if isinstance(instances, GPU):
            instances = [instances]
        kwargs.setdefault("context", self.get_serializer_context())
        kwargs["context"]["latest"] = readings.latest_for({g.node_id for g in instances})
        return super().get_serializer(*args, **kwargs)
