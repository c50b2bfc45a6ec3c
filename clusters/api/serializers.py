from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from clusters.models import Cluster, NamespaceMapping


class NamespaceMappingSerializer(serializers.ModelSerializer):
    class Meta:
        model = NamespaceMapping
        fields = ["id", "namespace", "tenant"]


class ClusterSerializer(serializers.ModelSerializer):
    token = serializers.CharField(
        write_only=True, help_text=_("Service-account token: stored encrypted, never returned.")
    )
    namespaces = NamespaceMappingSerializer(many=True, read_only=True)

    class Meta:
        model = Cluster
        fields = ["id", "name", "api_url", "ca_bundle", "token", "token_hint", "enforcement",
                  "kueue", "pool", "namespaces", "synced_at", "sync_error", "sync_report",
                  "created"]  # fmt: skip
        read_only_fields = ["token_hint", "synced_at", "sync_error", "sync_report", "created"]


class ClusterUpdateSerializer(ClusterSerializer):
    """A change of a cluster: the token only when it changes; the pool stays."""

    token = serializers.CharField(
        write_only=True, required=False, allow_blank=True,
        help_text=_("A new service-account token; left out or blank, the token is kept."),
    )  # fmt: skip

    class Meta(ClusterSerializer.Meta):
        read_only_fields = [*ClusterSerializer.Meta.read_only_fields, "pool"]
