from rest_framework import serializers

from agents.models import GPU, Node


class GPUSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    latest = serializers.SerializerMethodField(
        help_text="The latest readings the agent reported (units in the key names)."
    )

    class Meta:
        model = GPU
        fields = [
            "id",
            "node",
            "index",
            "uuid",
            "model",
            "vendor",
            "memory_total_mib",
            "pci_bus_id",
            "serial",
            "health",
            "mig_mode",
            "last_seen",
            "latest",
        ]
        read_only_fields = fields

    def get_latest(self, gpu: GPU) -> dict:
        latest = self.context.get("latest", {}).get(gpu.node_id, {})
        return latest.get("gpus", {}).get(gpu.uuid, {})


class NodeSerializer(serializers.ModelSerializer):
    gpu_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "hostname",
            "source",
            "agent_url",
            "labels",
            "state",
            "last_seen",
            "last_error",
            "missed_polls",
            "agent_version",
            "driver_version",
            "cuda_version",
            "gpu_count",
        ]
        read_only_fields = fields
