"""Tenants, memberships and quotas over the API. Writes go through ``quotas.tenancy.services``,
which holds the rules; its field-level errors come back as 400s that changed nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import exceptions, serializers

from audit.interface import request_address
from pools.models import Pool
from quotas import permissions
from quotas.choices import Role
from quotas.models import Membership, Quota, Tenant
from quotas.tenancy import services
from quotas.tenancy.api.docs import MEMBERSHIP_EXAMPLES, QUOTA_EXAMPLES, TENANT_EXAMPLES
from quotas.tenancy.usage import QuotaUsage


def call_service(fn: Callable[..., Any], *args, **kwargs) -> Any:
    """A tenancy service, its refusals in DRF's terms (its ValidationError: portal.api_errors)."""
    try:
        return fn(*args, **kwargs)
    except PermissionError as exc:
        raise exceptions.PermissionDenied(str(exc)) from None


class _ServiceSerializer(serializers.ModelSerializer):
    def actor_and_address(self) -> dict[str, Any]:
        request = self.context["request"]
        return {"actor": request.user, "address": request_address(request)}


@extend_schema_serializer(examples=TENANT_EXAMPLES)
class TenantSerializer(_ServiceSerializer):
    """A team. Platform admins create and change tenants; members read their own."""

    role = serializers.SerializerMethodField(help_text="The caller's role in this tenant.")
    admin = serializers.CharField(
        write_only=True, required=False, max_length=150,
        help_text="Required to create a tenant: the user name of its first admin, an active "
        "user (make a new one with POST /api/v1/users/ first). Later, admins are memberships.",
    )  # fmt: skip

    class Meta:
        model = Tenant
        fields = ["id", "name", "slug", "description", "role", "admin", "created"]
        read_only_fields = ["id", "created"]
        extra_kwargs = {"description": {"max_length": 2000}}

    def validate(self, attrs: dict) -> dict:
        if self.instance is not None and "admin" in attrs:
            raise serializers.ValidationError(
                {"admin": [_("A tenant's admins change through its memberships.")]}
            )
        return attrs

    def get_role(self, tenant: Tenant) -> str | None:
        roles = self.context.get("roles")
        if roles is None:
            return permissions.role_in(self.context["request"].user, tenant)
        return roles.get(tenant.pk)

    def create(self, validated_data: dict) -> Tenant:
        return call_service(services.create_tenant, **self.actor_and_address(), **validated_data)

    def update(self, instance: Tenant, validated_data: dict) -> Tenant:
        who = self.actor_and_address()
        return call_service(
            services.update_tenant, instance.pk, who["actor"], address=who["address"],
            **validated_data,
        )  # fmt: skip


class _VisibleTenants(serializers.PrimaryKeyRelatedField):
    """Only the tenants the caller may see: another tenant's id is 'does not exist'."""

    def get_queryset(self):
        return permissions.visible_tenants(self.context["request"].user)


@extend_schema_serializer(examples=MEMBERSHIP_EXAMPLES)
class MembershipSerializer(_ServiceSerializer):
    """A user's role in a tenant. Added by user name; afterwards only the role changes."""

    tenant = _VisibleTenants()
    username = serializers.CharField(
        source="user.username", max_length=150, help_text="The member's user name."
    )
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)

    class Meta:
        model = Membership
        fields = ["id", "tenant", "user", "username", "role", "created"]
        read_only_fields = ["id", "user", "created"]
        validators = []  # one membership per tenant: said per field by the service

    def validate(self, attrs: dict) -> dict:
        if self.instance is not None:
            errors = {}
            if "tenant" in attrs and attrs["tenant"].pk != self.instance.tenant_id:
                errors["tenant"] = [_("Only the role of a membership can change.")]
            if "user" in attrs and attrs["user"]["username"] != self.instance.user.username:
                errors["username"] = [_("Only the role of a membership can change.")]
            if errors:
                raise serializers.ValidationError(errors)
        return attrs

    def create(self, validated_data: dict) -> Membership:
        who = self.actor_and_address()
        return call_service(
            services.add_member, validated_data["tenant"].pk, who["actor"],
            username=validated_data["user"]["username"], role=validated_data["role"],
            address=who["address"],
        )  # fmt: skip

    def update(self, instance: Membership, validated_data: dict) -> Membership:
        who = self.actor_and_address()
        return call_service(
            services.change_role, instance.pk, who["actor"],
            role=validated_data.get("role", instance.role), address=who["address"],
        )  # fmt: skip


@extend_schema_serializer(examples=QUOTA_EXAMPLES)
class QuotaSerializer(_ServiceSerializer):
    """A tenant's guarantees and limits in a pool and its approval policy."""

    tenant = serializers.PrimaryKeyRelatedField(queryset=Tenant.objects.all())
    pool = serializers.PrimaryKeyRelatedField(queryset=Pool.objects.all())

    class Meta:
        model = Quota
        fields = ["id", "tenant", "pool", *services.QUOTA_FIELDS, "created", "updated"]
        read_only_fields = ["id", "created", "updated"]
        validators = []  # guarantee within limit, one quota per pool: said per field

    def validate(self, attrs: dict) -> dict:
        if self.instance is not None:
            moved = [
                key for key in ("tenant", "pool")
                if key in attrs and attrs[key].pk != getattr(self.instance, f"{key}_id")
            ]  # fmt: skip
            if moved:
                raise serializers.ValidationError(
                    {key: [_("A quota stays with its tenant and pool.")] for key in moved}
                )
        return attrs

    def create(self, validated_data: dict) -> Quota:
        return call_service(services.create_quota, **self.actor_and_address(), **validated_data)

    def update(self, instance: Quota, validated_data: dict) -> Quota:
        who = self.actor_and_address()
        fields = {k: v for k, v in validated_data.items() if k not in ("tenant", "pool")}
        return call_service(
            services.update_quota, instance.pk, who["actor"], address=who["address"], **fields
        )


class UsageSerializer(serializers.Serializer):
    vgpus = serializers.IntegerField()
    compute_pct = serializers.IntegerField()
    memory_mib = serializers.IntegerField()
    gpu_hours = serializers.DecimalField(max_digits=14, decimal_places=4, coerce_to_string=False)


class QuotaUsageSerializer(serializers.Serializer):
    """One pool of a tenant: held now and GPU-hours this budget period, against the quota."""

    def to_representation(self, usage: QuotaUsage) -> dict:
        quota, names = usage.quota, self.context.get("usernames", {})
        return {
            "quota": quota.pk,
            "pool": {"id": quota.pool_id, "name": quota.pool.name, "slug": quota.pool.slug},
            "budget_period": quota.budget_period,
            "period_start": serializers.DateTimeField().to_representation(usage.period_start),
            "used": UsageSerializer(usage.used).data,
            "guaranteed": _dims(quota, "guaranteed"),
            "limit": _dims(quota, "limit"),
            "members": [
                {"user": uid, "username": names.get(uid, ""), **UsageSerializer(u).data}
                for uid, u in sorted(usage.members.items(), key=lambda item: item[0])
            ],
        }


def _dims(quota: Quota, prefix: str) -> dict[str, int]:
    return {
        "vgpus": getattr(quota, f"{prefix}_vgpus"),
        "compute_pct": getattr(quota, f"{prefix}_compute_pct"),
        "memory_mib": getattr(quota, f"{prefix}_memory_mib"),
        "gpu_hours": getattr(quota, f"{prefix}_gpu_hours"),
    }
