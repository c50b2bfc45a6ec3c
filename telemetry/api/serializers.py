from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from agents.models import GPU
from telemetry import readings
from telemetry.api.docs import GPU_EXAMPLES


@extend_schema_serializer(examples=GPU_EXAMPLES)
class GPUSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    latest = serializers.SerializerMethodField(
        help_text="The latest readings the agent reported (units in the key names)."
    )
    last_seen = serializers.SerializerMethodField(
        help_text="When the card was last reported by its agent."
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
            "health_detail",
            "mig_mode",
            "last_seen",
            "latest",
        ]
        read_only_fields = fields

    def get_latest(self, gpu: GPU) -> dict:
        latest = self.context.get("latest", {}).get(gpu.node_id, {})
        return readings.card_reading(latest.get("gpus", {}).get(gpu.uuid))

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_last_seen(self, gpu: GPU) -> str | None:
        latest = self.context.get("latest", {}).get(gpu.node_id)
        moment = readings.seen_at(gpu.last_seen, latest, gpu.uuid)
        return moment.isoformat().replace("+00:00", "Z") if moment else None
