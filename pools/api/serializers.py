from __future__ import annotations

from decimal import Decimal

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from agents.choices import GpuVendor
from pools import configuration, launch
from pools.api.docs import ALLOCATION_SERIALIZER_EXAMPLES, POOL_EXAMPLES
from pools.choices import AllocationState, PlacementPolicy
from pools.models import MAX_RATIO, Allocation, Pool, PoolCard
from portal.security import client_ip


def _who(serializer: serializers.Serializer) -> dict:
    request = serializer.context["request"]
    return {"actor": request.user, "address": client_ip(request)}


# Read by members; written through pools.configuration, which holds the rules (and audits),
# by those with the pool permissions (pools.permissions).
@extend_schema_serializer(examples=POOL_EXAMPLES)
class PoolSerializer(serializers.ModelSerializer):
    """A pool: a named set of cards, its matching rules, oversubscription and policy."""

    name = serializers.CharField(max_length=100)
    slug = serializers.SlugField(max_length=100)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    match_models = serializers.ListField(
        child=serializers.CharField(max_length=128), max_length=configuration.MAX_MODELS,
        required=False, help_text="GPU models as the driver names them; empty: any.",
    )  # fmt: skip
    match_vendor = serializers.ChoiceField(
        choices=GpuVendor.choices, required=False, allow_blank=True,
        help_text="Only this vendor's cards join; empty: any vendor.",
    )  # fmt: skip
    match_labels = serializers.DictField(
        child=serializers.CharField(max_length=253, allow_blank=True), required=False,
        help_text="Node labels a card's node must all carry.",
    )  # fmt: skip
    match_by_rules = serializers.BooleanField(required=False)
    compute_ratio = serializers.DecimalField(
        max_digits=4, decimal_places=2, min_value=Decimal(1), max_value=MAX_RATIO,
        required=False, help_text="1.00 (none) to 10.00.",
    )  # fmt: skip
    memory_ratio = serializers.DecimalField(
        max_digits=4, decimal_places=2, min_value=Decimal(1), max_value=MAX_RATIO,
        required=False, help_text="1.00 (none) to 10.00.",
    )  # fmt: skip
    policy = serializers.ChoiceField(choices=PlacementPolicy.choices, required=False)
    card_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Pool
        fields = [
            "id", "name", "slug", "description", "match_models", "match_vendor",
            "match_labels", "match_by_rules", "compute_ratio", "memory_ratio", "policy",
            "card_count", "created", "updated",
        ]  # fmt: skip
        read_only_fields = ["id", "created", "updated"]

    def create(self, validated_data: dict) -> Pool:
        pool = configuration.create_pool(validated_data, **_who(self))
        pool.card_count = pool.cards.count()
        return pool

    def update(self, instance: Pool, validated_data: dict) -> Pool:
        pool = configuration.update_pool(instance.pk, validated_data, **_who(self))
        pool.card_count = pool.cards.count()
        return pool


class PoolCardsChangeSerializer(serializers.Serializer):
    gpus = serializers.ListField(
        child=serializers.IntegerField(min_value=1), min_length=1,
        max_length=configuration.MAX_CARDS_PER_CHANGE, help_text="Card (GPU) ids.",
    )  # fmt: skip


class PoolCardSerializer(serializers.ModelSerializer):
    """A card in a pool, with its capacity (ratios applied) and what is allocated on it."""

    gpu_uuid = serializers.CharField(source="gpu.uuid", read_only=True)
    model = serializers.CharField(source="gpu.model", read_only=True)
    vendor = serializers.CharField(source="gpu.vendor", read_only=True)
    node = serializers.CharField(source="gpu.node.name", read_only=True)
    memory_physical_mib = serializers.IntegerField(source="gpu.memory_total_mib", read_only=True)

    class Meta:
        model = PoolCard
        fields = [
            "id", "pool", "gpu", "gpu_uuid", "model", "vendor", "node", "added_by_hand",
            "memory_physical_mib", "compute_capacity", "memory_capacity_mib",
            "compute_allocated", "memory_allocated_mib", "slices", "held_whole",
            "cordoned_at", "cordon_reason",
        ]  # fmt: skip
        read_only_fields = fields


@extend_schema_serializer(examples=ALLOCATION_SERIALIZER_EXAMPLES)
class AllocationSerializer(serializers.ModelSerializer):
    """One vGPU and how to use it: the launch environment exactly as the node agent
    expects it, the same as shell exports, and HAMi's Kubernetes limits."""

    agent_id = serializers.CharField(read_only=True)
    # None once the card is gone (its node deleted under the slice).
    gpu_uuid = serializers.CharField(source="gpu.uuid", read_only=True, default=None,
                                     allow_null=True)  # fmt: skip
    node = serializers.CharField(source="gpu.node.name", read_only=True, default=None,
                                 allow_null=True)  # fmt: skip
    holder = serializers.CharField(source="lease.holder.get_username", read_only=True)
    label = serializers.CharField(source="lease.label", read_only=True)
    unix_user = serializers.CharField(source="lease.unix_user", read_only=True)
    launch_env = serializers.SerializerMethodField()
    export = serializers.SerializerMethodField()
    kubernetes_limits = serializers.SerializerMethodField()

    class Meta:
        model = Allocation
        fields = [
            "id", "agent_id", "lease", "pool", "gpu", "gpu_uuid", "node", "compute_pct",
            "memory_mib", "whole_card", "state", "stranded_reason", "agent_sync", "holder",
            "label", "unix_user", "created", "placed_at", "released_at", "launch_env",
            "export", "kubernetes_limits",
        ]  # fmt: skip
        read_only_fields = fields

    def _env(self, allocation: Allocation) -> dict[str, str] | None:
        if allocation.state != AllocationState.ACTIVE:
            return None
        return launch.launch_env(allocation)

    def get_launch_env(self, allocation: Allocation) -> dict[str, str] | None:
        return self._env(allocation)

    def get_export(self, allocation: Allocation) -> str:
        return launch.export_block(self._env(allocation))

    def get_kubernetes_limits(self, allocation: Allocation) -> dict[str, int] | None:
        return launch.kubernetes_limits(allocation) if self._env(allocation) else None
