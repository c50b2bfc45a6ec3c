from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from agents import node_audit, registration
from agents.api.docs import NODE_EXAMPLES
from agents.choices import NodeState
from agents.models import Node
from agents.permissions import can_see_agent_details


# Read by members; written by staff through agents.registration, which holds the rules.
@extend_schema_serializer(examples=NODE_EXAMPLES)
class NodeSerializer(serializers.ModelSerializer):
    """A node: a GPU server whose agent the portal reads."""

    # Written through agents.registration, which holds the rules, by those with the node
    # permissions (agents.permissions).

    gpu_count = serializers.IntegerField(read_only=True)
    name = serializers.CharField(max_length=255)
    agent_url = serializers.CharField(max_length=200)
    labels = serializers.JSONField(required=False)
    state = serializers.ChoiceField(choices=NodeState.choices, required=False)
    token = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        style={"input_type": "password"},
        help_text="The agent's bearer token; stored encrypted, never returned. Empty keeps it.",
    )
    token_hint = serializers.CharField(
        source="agent_token_hint",
        read_only=True,
        help_text="The token's last characters, to tell tokens apart. Like agent_url and "
        "last_error, only in answers to users with a node permission.",
    )

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "hostname",
            "source",
            "agent_url",
            "token",
            "token_hint",
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
        read_only_fields = [
            "id",
            "hostname",
            "source",
            "last_seen",
            "last_error",
            "missed_polls",
            "agent_version",
            "driver_version",
            "cuda_version",
        ]

    # Left out of the answer for readers without a node permission (agents.permissions),
    # so not required in the answer's schema (portal.api_docs).
    AGENT_DETAILS = ANSWER_MAY_OMIT = ("agent_url", "token_hint", "last_error")

    def to_representation(self, instance: Node) -> dict:
        data = super().to_representation(instance)
        # Decided once per answer: a list shares its root serializer's context.
        shown = self.context.get("agent_details")
        if shown is None:
            request = self.context.get("request")
            user = getattr(request, "user", None)
            shown = self.context["agent_details"] = bool(user and can_see_agent_details(user))
        if not shown:
            for name in self.AGENT_DETAILS:
                data.pop(name, None)
        return data

    def _who(self) -> dict:
        return node_audit.who(self.context.get("request"))

    def create(self, validated_data: dict) -> Node:
        node = registration.register_node(**validated_data, **self._who())
        node.gpu_count = 0
        return node

    def update(self, instance: Node, validated_data: dict) -> Node:
        node = registration.update_node(instance.pk, **validated_data, **self._who())
        node.gpu_count = node.gpus.count()
        return node
