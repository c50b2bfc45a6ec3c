"""Rules, subscriptions and events in the API. Writes go through alerts.config (which
holds the rules and audits); its field errors reach the API's exception handler, a 400."""

from __future__ import annotations

from django.utils.translation import gettext
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from alerts import config
from alerts.api.docs import RULE_EXAMPLES, SUBSCRIPTION_EXAMPLES
from alerts.choices import Comparison, Condition, ScopeKind, Severity
from alerts.models import Event, Rule, Subscription
from alerts.permissions import managed_tenants, visible_rules
from audit.interface import request_address


@extend_schema_serializer(examples=RULE_EXAMPLES)
class RuleSerializer(serializers.ModelSerializer):
    condition = serializers.ChoiceField(choices=Condition.choices)
    comparison = serializers.ChoiceField(choices=Comparison.choices, required=False)
    severity = serializers.ChoiceField(choices=Severity.choices, required=False)
    scope_kind = serializers.ChoiceField(choices=ScopeKind.choices, required=False)
    scope_id = serializers.IntegerField(
        required=False, allow_null=True, write_only=True,
        help_text="The pool's, node's or tenant's id when scope_kind is one of them.",
    )  # fmt: skip
    kind = serializers.CharField(read_only=True)
    label = serializers.CharField(
        read_only=True, help_text="The name in the request's language (default rules)."
    )

    class Meta:
        model = Rule
        fields = ["id", "key", "name", "label", "description", "kind", "condition", "comparison",
                  "threshold", "for_seconds", "severity", "scope_kind", "scope_id", "pool",
                  "node", "tenant", "renotify_seconds", "enabled", "builtin", "created",
                  "updated"]  # fmt: skip
        read_only_fields = ["id", "pool", "node", "tenant", "builtin", "created", "updated"]
        extra_kwargs = {"key": {"required": False}}

    def _save(self, rule_id: int | None, validated: dict) -> Rule:
        request = self.context["request"]
        values = dict(validated)
        if rule_id is not None and "scope_id" not in values:
            rule = Rule.objects.get(pk=rule_id)
            values["scope_id"] = rule.pool_id or rule.node_id or rule.tenant_id
        pk = config.save_rule(rule_id, values, actor=request.user, address=request_address(request))
        return Rule.objects.get(pk=pk)

    def create(self, validated: dict) -> Rule:
        return self._save(None, validated)

    def update(self, instance: Rule, validated: dict) -> Rule:
        return self._save(instance.pk, validated)


@extend_schema_serializer(examples=SUBSCRIPTION_EXAMPLES)
class SubscriptionSerializer(serializers.ModelSerializer):
    rules = serializers.PrimaryKeyRelatedField(many=True, queryset=Rule.objects.all(),
                                               required=False)  # fmt: skip
    channel = serializers.IntegerField(source="channel_id")
    tenant = serializers.IntegerField(
        source="tenant_id", required=False, allow_null=True,
        help_text="A tenant you administer, for the tenant's subscription; empty: your own.",
    )  # fmt: skip
    owner = serializers.IntegerField(
        source="owner_id", read_only=True, allow_null=True,
        help_text="The user whose own subscription it is; null for a tenant's.",
    )  # fmt: skip
    min_severity = serializers.ChoiceField(choices=Severity.choices, required=False)
    scope_kind = serializers.ChoiceField(choices=ScopeKind.choices, required=False)

    class Meta:
        model = Subscription
        fields = ["id", "owner", "tenant", "channel", "rules", "min_severity", "scope_kind",
                  "scope_name", "quiet_start", "quiet_end", "enabled", "created",
                  "updated"]  # fmt: skip
        read_only_fields = ["id", "owner", "created", "updated"]
        extra_kwargs = {"scope_name": {"help_text": (
            "With a pool, node or tenant scope: the pool's slug, the node's name or the "
            "tenant's slug, of one you may see (else a 400)."
        )}}  # fmt: skip

    def validate_rules(self, value: list[Rule]) -> list[Rule]:
        visible = set(visible_rules(self.context["request"].user).values_list("pk", flat=True))
        if any(rule.pk not in visible for rule in value):
            raise serializers.ValidationError(gettext("Choose rules that exist."))
        return value

    def validate_tenant(self, value: int | None) -> int | None:
        if (
            value is not None
            and not managed_tenants(self.context["request"].user).filter(pk=value).exists()
        ):
            raise serializers.ValidationError("Not a tenant you administer.")
        return value

    def _values(self, validated: dict) -> dict:
        values = {k: v for k, v in validated.items() if k not in ("tenant_id", "channel_id")}
        if "channel_id" in validated:
            values["channel"] = validated["channel_id"]
        if "rules" in values:
            values["rules"] = [rule.pk for rule in values["rules"]]
        return values

    def create(self, validated: dict) -> Subscription:
        request = self.context["request"]
        tenant_id = validated.get("tenant_id")
        pk = config.save_subscription(
            None, self._values(validated), actor=request.user,
            address=request_address(request),
            owner_id=None if tenant_id else request.user.pk, tenant_id=tenant_id,
        )  # fmt: skip
        return Subscription.objects.get(pk=pk)

    def update(self, instance: Subscription, validated: dict) -> Subscription:
        request = self.context["request"]
        if "tenant_id" in validated and validated["tenant_id"] != instance.tenant_id:
            raise serializers.ValidationError({"tenant": ["A subscription's owner cannot change."]})
        config.save_subscription(
            instance.pk, self._values(validated), actor=request.user,
            address=request_address(request),
        )  # fmt: skip
        return Subscription.objects.get(pk=instance.pk)


class EventSerializer(serializers.ModelSerializer):
    # A platform event (a node's, a card's) has none.
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    rule_label = serializers.CharField(
        read_only=True, help_text="The rule's name in the request's language."
    )
    summary = serializers.CharField(
        source="summary_text", read_only=True,
        help_text="What happened, in the request's language, with units (from summary_key "
        "and summary_params; the stored text for events from before keys).",
    )  # fmt: skip

    class Meta:
        model = Event
        fields = ["id", "rule", "rule_key", "rule_name", "rule_label", "severity", "scope",
                  "state", "tenant", "labels", "summary", "summary_key", "summary_params",
                  "started_at", "last_seen_at", "acknowledged_at", "acknowledged_by",
                  "resolved_at"]  # fmt: skip
        read_only_fields = fields
