from django.db.models import Count
from rest_framework import viewsets

from agents.api.node_registration import NodeRegistrationMixin
from agents.api.serializers import NodeSerializer
from agents.models import Node
from agents.permissions import NodePermissions


class NodeViewSet(NodeRegistrationMixin, viewsets.ModelViewSet):
    queryset = Node.objects.annotate(gpu_count=Count("gpus")).order_by("name")
    serializer_class = NodeSerializer
    permission_classes = [NodePermissions]
