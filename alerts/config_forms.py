"""The rule and subscription forms. They only carry input; alerts.config holds the rules
(and names the field at fault), so the pages and the API refuse the same things."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from agents.models import Node
from alerts.choices import (
    CONDITION_KIND,
    Comparison,
    Condition,
    RuleKind,
    ScopeKind,
    Severity,
)
from alerts.models import Channel, Rule, Subscription
from pools.models import Pool
from quotas.models import Tenant

# The conditions a rule made by hand may watch (the portal raises the others itself).
EVALUATED = [(value, label) for value, label in Condition.choices
             if CONDITION_KIND.get(value) != RuleKind.EXTERNAL]  # fmt: skip
SCOPE_FIELDS = {ScopeKind.POOL: "pool", ScopeKind.NODE: "node", ScopeKind.TENANT: "tenant"}


class RuleForm(forms.Form):
    # alerts.config's name for a field, where this form calls it otherwise: the scope's
    # error shows beside the scope it is about.
    SERVICE_FIELDS = {"scope_id": "scope_kind"}

    name = forms.CharField(label=_("Name"), max_length=200)
    description = forms.CharField(label=_("Description"), required=False, max_length=2000,
                                  widget=forms.Textarea(attrs={"rows": 2}))  # fmt: skip
    condition = forms.ChoiceField(label=_("Condition"), choices=EVALUATED)
    comparison = forms.ChoiceField(label=_("Comparison"), choices=Comparison.choices)
    threshold = forms.FloatField(label=_("Threshold"), required=False)
    for_seconds = forms.IntegerField(
        label=_("For (seconds)"), min_value=0, initial=0,
        help_text=_("How long the condition must hold before the rule fires."),
    )  # fmt: skip
    severity = forms.ChoiceField(label=_("Severity"), choices=Severity.choices,
                                 initial=Severity.WARNING)  # fmt: skip
    scope_kind = forms.ChoiceField(label=_("Scope"), choices=ScopeKind.choices)
    pool = forms.ModelChoiceField(label=_("Pool"), queryset=Pool.objects.all(), required=False)
    node = forms.ModelChoiceField(label=_("Node"), queryset=Node.objects.all(), required=False)
    tenant = forms.ModelChoiceField(label=_("Tenant"), queryset=Tenant.objects.all(),
                                    required=False)  # fmt: skip
    renotify_seconds = forms.IntegerField(
        label=_("Re-notify after (seconds)"), min_value=0, initial=3600,
        help_text=_("A firing event is sent again this often; 0: once."),
    )  # fmt: skip
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args, rule: Rule | None = None, **kwargs) -> None:
        if rule is not None:
            kwargs.setdefault("initial", {
                "name": rule.name, "description": rule.description,
                "condition": rule.condition, "comparison": rule.comparison,
                "threshold": rule.threshold, "for_seconds": rule.for_seconds,
                "severity": rule.severity, "scope_kind": rule.scope_kind, "pool": rule.pool,
                "node": rule.node, "tenant": rule.tenant,
                "renotify_seconds": rule.renotify_seconds, "enabled": rule.enabled,
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        self.rule = rule
        if rule is not None and rule.builtin:
            # A built-in rule keeps its condition (the portal raises it by that).
            del self.fields["condition"]

    def values(self) -> dict:
        data = dict(self.cleaned_data)
        target = data.pop(SCOPE_FIELDS.get(data["scope_kind"], ""), None)
        for name in SCOPE_FIELDS.values():
            data.pop(name, None)
        data["scope_id"] = target.pk if target is not None else None
        return data


class SubscriptionForm(forms.Form):
    tenant = forms.ModelChoiceField(
        label=_("Subscriber"), queryset=Tenant.objects.none(), required=False,
        empty_label=_("Me"),
        help_text=_("A tenant's subscription is managed by the tenant's admins and gets "
                    "that tenant's events only."),
    )  # fmt: skip
    channel = forms.ModelChoiceField(label=_("Channel"), queryset=Channel.objects.none())
    rules = forms.ModelMultipleChoiceField(
        label=_("Rules"), queryset=Rule.objects.none(), required=False,
        help_text=_("None chosen: every rule."),
        widget=forms.SelectMultiple(attrs={"size": 8}),
    )  # fmt: skip
    min_severity = forms.ChoiceField(label=_("Lowest severity"), choices=Severity.choices,
                                     initial=Severity.WARNING)  # fmt: skip
    scope_kind = forms.ChoiceField(label=_("Scope"), choices=ScopeKind.choices)
    scope_name = forms.CharField(
        label=_("Scope name"), required=False, max_length=255,
        help_text=_("The pool's or tenant's slug, or the node's name."),
    )  # fmt: skip
    quiet_start = forms.TimeField(label=_("Quiet from"), required=False,
                                  widget=forms.TimeInput(attrs={"type": "time"}))  # fmt: skip
    quiet_end = forms.TimeField(
        label=_("Quiet until"), required=False, widget=forms.TimeInput(attrs={"type": "time"}),
        help_text=_("Inside the quiet hours messages wait for their end; critical ones go "
                    "at once."),
    )  # fmt: skip
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args, subscription: Subscription | None = None, tenants=None,
                 channels=None, rules=None, **kwargs) -> None:  # fmt: skip
        if subscription is not None:
            kwargs.setdefault("initial", {
                "channel": subscription.channel_id,
                "rules": list(subscription.rules.values_list("pk", flat=True)),
                "min_severity": subscription.min_severity,
                "scope_kind": subscription.scope_kind, "scope_name": subscription.scope_name,
                "quiet_start": subscription.quiet_start, "quiet_end": subscription.quiet_end,
                "enabled": subscription.enabled,
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        self.fields["channel"].queryset = channels
        self.fields["rules"].queryset = rules
        self.fields["rules"].label_from_instance = lambda rule: rule.label
        if subscription is not None:
            del self.fields["tenant"]  # a subscription's owner does not change
        else:
            self.fields["tenant"].queryset = tenants
            if not tenants.exists():
                # Nobody to choose but oneself; a tenant posted anyway is refused.
                self.fields["tenant"].widget = forms.HiddenInput()

    def values(self) -> dict:
        data = dict(self.cleaned_data)
        data.pop("tenant", None)
        data["channel"] = data["channel"].pk
        data["rules"] = [rule.pk for rule in data["rules"]]
        return data
