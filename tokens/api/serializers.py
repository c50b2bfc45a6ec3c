"""Tokens and service accounts over the API. Writes go through ``tokens.services``, which
holds the rules; its field-level errors come back as 400s that changed nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import exceptions, serializers

from quotas import permissions as quota_permissions
from tokens.api.docs import SERVICE_ACCOUNT_EXAMPLES, TOKEN_EXAMPLES
from tokens.choices import Scope
from tokens.models import ApiToken, ServiceAccount
from tokens.services import NAME_MAX


def call_service(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A service, its refusals in DRF's terms (its ValidationError: portal.api_errors)."""
    try:
        return fn(*args, **kwargs)
    except PermissionError as exc:
        raise exceptions.PermissionDenied(str(exc)) from None


@extend_schema_serializer(examples=TOKEN_EXAMPLES)
class ApiTokenSerializer(serializers.ModelSerializer):
    """An API token, without its key: that is shown once, in the answer that creates it."""

    hint = serializers.CharField(read_only=True, help_text="The key's start, to recognise it.")
    name = serializers.CharField(max_length=NAME_MAX, help_text="What the token is for.")
    scope = serializers.ChoiceField(
        choices=Scope.choices, default=Scope.WRITE,
        help_text="read: only GET, HEAD and OPTIONS; write: everything its user may do.",
    )  # fmt: skip
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True,
        help_text="When it stops working; at most TOKEN_MAX_DAYS (365) days ahead, which is "
        "also the default. A token made with a token ends no later than that one.",
    )  # fmt: skip

    class Meta:
        model = ApiToken
        fields = [
            "id", "name", "hint", "scope", "created", "expires_at", "last_used_at",
            "last_used_from", "revoked_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created", "last_used_at", "last_used_from", "revoked_at"]


class NewApiTokenSerializer(ApiTokenSerializer):
    key = serializers.CharField(
        read_only=True,
        help_text="The secret to send as Authorization: Bearer <key>. Shown in this answer "
        "only: the portal keeps a digest of it, never the key.",
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = [*ApiTokenSerializer.Meta.fields, "key"]


class _VisibleTenants(serializers.PrimaryKeyRelatedField):
    """Only the tenants the caller may see: another tenant's id is 'does not exist'."""

    def get_queryset(self):
        return quota_permissions.visible_tenants(self.context["request"].user)


@extend_schema_serializer(examples=SERVICE_ACCOUNT_EXAMPLES)
class ServiceAccountSerializer(serializers.ModelSerializer):
    """A tenant's account for CI jobs: a member of the tenant that signs in with tokens only."""

    tenant = _VisibleTenants(help_text="The tenant (id) the account belongs to.")
    name = serializers.CharField(max_length=NAME_MAX)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    username = serializers.CharField(
        source="user.username", read_only=True,
        help_text="Its user name, as the member lists and the audit log show it.",
    )  # fmt: skip
    active = serializers.BooleanField(source="is_active", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = ServiceAccount
        fields = [
            "id", "tenant", "name", "description", "username", "active", "created",
            "created_by", "disabled_at",
        ]  # fmt: skip
        read_only_fields = ["id", "created", "disabled_at"]
        validators: list = []  # a taken name is the service's field error on "name"
