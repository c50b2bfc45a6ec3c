"""Channels in the API. Writes go through alerts.services, which holds the rules; secrets
(robot URLs, signing secrets) are accepted in ``settings`` and never returned: answers
carry the non-secret settings and ``secret_hint``."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from alerts import services
from alerts.api.docs import CHANNEL_EXAMPLES
from alerts.choices import ChannelKind
from alerts.models import Channel, Delivery, DeliveryAttempt
from alerts.permissions import managed_tenants
from audit.interface import request_address

TOP_LEVEL = {"name", "kind", "tenant", "enabled", "language", "settings"}


def as_drf_error(exc: DjangoValidationError) -> serializers.ValidationError:
    """The services' flat errors, with each setting's under ``settings``."""
    errors: dict = {}
    for key, messages in exc.message_dict.items():
        if key in TOP_LEVEL:
            errors.setdefault(
                key, messages if key != "settings" else {"non_field_errors": messages}
            )
        else:
            nested = errors.setdefault("settings", {})
            if isinstance(nested, list):
                nested = errors["settings"] = {"non_field_errors": nested}
            nested[key] = messages
    return serializers.ValidationError(errors)


@extend_schema_serializer(examples=CHANNEL_EXAMPLES)
class ChannelSerializer(serializers.ModelSerializer):
    name = serializers.CharField(max_length=services.NAME_MAX_CHARS)
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    language = serializers.ChoiceField(
        choices=list(settings.LANGUAGES),
        required=False,
        allow_blank=True,
        help_text="The messages' language; empty: for a user's own channel the language they "
        "chose (GET /api/v1/me/preferences/), else the site's default.",
    )
    settings = serializers.JSONField(
        help_text="The kind's settings (docs/alerts.md). Secret ones (robot URLs, signing "
        "secrets) are write-only: left out on update, they keep their values."
    )
    tenant = serializers.IntegerField(
        source="tenant_id", required=False, allow_null=True,
        help_text="A tenant you administer, for a tenant's channel; empty: your own.",
    )  # fmt: skip
    owner = serializers.IntegerField(
        source="owner_id", read_only=True, allow_null=True,
        help_text="The user whose own channel it is; null for a tenant's.",
    )  # fmt: skip

    class Meta:
        model = Channel
        fields = ["id", "name", "kind", "owner", "tenant", "enabled", "disabled_reason",
                  "language", "settings", "secret_hint", "created", "updated"]  # fmt: skip
        read_only_fields = ["id", "owner", "disabled_reason", "secret_hint", "created", "updated"]

    def validate_tenant(self, value: int | None) -> int | None:
        if value is None:
            return None
        if not managed_tenants(self.context["request"].user).filter(pk=value).exists():
            raise serializers.ValidationError("Not a tenant you administer.")
        return value

    def create(self, validated: dict) -> Channel:
        request = self.context["request"]
        tenant_id = validated.get("tenant_id")
        try:
            channel_id = services.create_channel(
                actor=request.user, address=request_address(request),
                name=validated["name"], kind=validated["kind"],
                settings_values=validated["settings"],
                owner_id=None if tenant_id else request.user.pk, tenant_id=tenant_id,
                enabled=validated.get("enabled", True), language=validated.get("language", ""),
            )  # fmt: skip
        except DjangoValidationError as exc:
            raise as_drf_error(exc) from None
        return Channel.objects.get(pk=channel_id)

    def update(self, instance: Channel, validated: dict) -> Channel:
        request = self.context["request"]
        if "tenant_id" in validated and validated["tenant_id"] != instance.tenant_id:
            raise serializers.ValidationError({"tenant": ["A channel's owner cannot change."]})
        changes = {k: v for k, v in validated.items() if k != "tenant_id"}
        try:
            services.update_channel(
                instance.pk, actor=request.user, address=request_address(request),
                changes=changes,
            )  # fmt: skip
        except DjangoValidationError as exc:
            raise as_drf_error(exc) from None
        return Channel.objects.get(pk=instance.pk)


class DeliveryAttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "started_at", "duration_ms", "ok", "permanent", "error"]


class DeliverySerializer(serializers.ModelSerializer):
    attempt_log = DeliveryAttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = ["id", "event", "test", "status", "attempts", "next_attempt_at", "last_error",
                  "created", "finished_at", "attempt_log"]  # fmt: skip
