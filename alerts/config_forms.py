"""The rule and subscription forms. They only carry input; alerts.config holds the rules
(and names the field at fault), so the pages and the API refuse the same things."""

from __future__ import annotations

from collections.abc import Mapping

from django import forms
from django.db.models import Model, QuerySet
from django.utils.translation import gettext_lazy as _

from alerts.choices import (
    CONDITION_KIND,
    SCOPE_NAME_FIELD,
    Comparison,
    Condition,
    RuleKind,
    ScopeKind,
    Severity,
)
from alerts.models import Channel, Rule, Subscription
from quotas.models import Tenant

# The conditions a rule made by hand may watch (the portal raises the others itself).
EVALUATED = [(value, label) for value, label in Condition.choices
             if CONDITION_KIND.get(value) != RuleKind.EXTERNAL]  # fmt: skip


class ScopeTargets:
    """A scope's pool, node or tenant, each chosen from a list of those the user may see
    (``alerts.permissions.scope_targets``), right after ``scope_kind``, which says which
    list counts: how rules and subscriptions both name their scope's target."""

    # alerts.config's name for a field, where the form calls it otherwise.
    field_names: dict[str, str] = {}
    scope_prefix = ""  # before each list's name: "pool", "node", "tenant"
    scope_error = "scope_id"  # alerts.config's key for a missing or unknown target

    def add_scope_fields(self, targets: Mapping[str, QuerySet], *, by_name: bool) -> None:
        """``by_name``: the options' values are the names events carry (SCOPE_NAME_FIELD),
        else the ids."""
        labels = {ScopeKind.POOL: (_("Pool"), _("Choose a pool"), _("Choose a listed pool.")),
                  ScopeKind.NODE: (_("Node"), _("Choose a node"), _("Choose a listed node.")),
                  ScopeKind.TENANT: (_("Tenant"), _("Choose a tenant"),
                                     _("Choose a listed tenant."))}  # fmt: skip
        lists = {
            self.scope_prefix + kind: forms.ModelChoiceField(
                label=label, queryset=targets[kind], required=False, empty_label=empty,
                to_field_name=SCOPE_NAME_FIELD[kind] if by_name else None,
                error_messages={"invalid_choice": invalid},
            )
            for kind, (label, empty, invalid) in labels.items()
        }  # fmt: skip
        self.fields["scope_kind"].help_text = _(
            "With a pool, node or tenant scope, choose that pool, node or tenant below."
        )
        fields = list(self.fields.items())
        at = list(self.fields).index("scope_kind") + 1
        self.fields = dict(fields[:at] + list(lists.items()) + fields[at:])

    def scope_target(self) -> Model | None:
        kind = self.cleaned_data.get("scope_kind")
        if kind not in SCOPE_NAME_FIELD:
            return None
        return self.cleaned_data.get(self.scope_prefix + kind)

    def values_but_scope(self, *also: str) -> dict:
        """The cleaned values without the scope's lists (and ``also``)."""
        lists = {self.scope_prefix + kind for kind in SCOPE_NAME_FIELD}
        return {k: v for k, v in self.cleaned_data.items() if k not in lists and k not in also}

    def service_fields(self) -> dict[str, str]:
        """``fields`` for portal.forms.add_service_errors: a missing or unknown target is
        the chosen kind's list's fault."""
        names = dict(self.field_names)
        kind = getattr(self, "cleaned_data", {}).get("scope_kind")
        if kind in SCOPE_NAME_FIELD:
            names[self.scope_error] = self.scope_prefix + kind
        return names


class RuleForm(ScopeTargets, forms.Form):
    field_names = {"scope_id": "scope_kind"}

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
    renotify_seconds = forms.IntegerField(
        label=_("Re-notify after (seconds)"), min_value=0, initial=3600,
        help_text=_("A firing event is sent again this often; 0: once."),
    )  # fmt: skip
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args, targets: Mapping[str, QuerySet], rule: Rule | None = None,
                 **kwargs) -> None:  # fmt: skip
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
        self.add_scope_fields(targets, by_name=False)
        self.rule = rule
        if rule is not None and rule.builtin:
            # A built-in rule keeps its condition (the portal raises it by that).
            del self.fields["condition"]

    def values(self) -> dict:
        target = self.scope_target()
        data = self.values_but_scope()
        data["scope_id"] = target.pk if target is not None else None
        return data


class SubscriptionForm(ScopeTargets, forms.Form):
    # "tenant" is the subscriber here; the scope's lists are scope_pool, scope_node, ...
    scope_prefix = "scope_"
    scope_error = "scope_name"

    tenant = forms.ModelChoiceField(
        label=_("Subscriber"), queryset=Tenant.objects.none(), required=False,
        empty_label=_("Me"),
        help_text=_("A tenant's subscription is managed by the tenant's admins and gets "
                    "that tenant's events only."),
    )  # fmt: skip
    channel = forms.ModelChoiceField(label=_("Channel"), queryset=Channel.objects.none(),
                                     empty_label=_("Choose a channel"))  # fmt: skip
    rules = forms.ModelMultipleChoiceField(
        label=_("Rules"), queryset=Rule.objects.none(), required=False,
        help_text=_("None chosen: every rule."),
        widget=forms.SelectMultiple(attrs={"size": 8}),
    )  # fmt: skip
    min_severity = forms.ChoiceField(label=_("Lowest severity"), choices=Severity.choices,
                                     initial=Severity.WARNING)  # fmt: skip
    scope_kind = forms.ChoiceField(label=_("Scope"), choices=ScopeKind.choices)
    quiet_start = forms.TimeField(label=_("Quiet from"), required=False,
                                  widget=forms.TimeInput(attrs={"type": "time"}))  # fmt: skip
    quiet_end = forms.TimeField(
        label=_("Quiet until"), required=False, widget=forms.TimeInput(attrs={"type": "time"}),
        help_text=_("Inside the quiet hours messages wait for their end; critical ones go "
                    "at once."),
    )  # fmt: skip
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args, targets: Mapping[str, QuerySet],
                 subscription: Subscription | None = None, tenants=None, channels=None,
                 rules=None, **kwargs) -> None:  # fmt: skip
        if subscription is not None:
            kwargs.setdefault("initial", {
                "channel": subscription.channel_id,
                "rules": list(subscription.rules.values_list("pk", flat=True)),
                "min_severity": subscription.min_severity,
                "scope_kind": subscription.scope_kind,
                f"{self.scope_prefix}{subscription.scope_kind}": subscription.scope_name,
                "quiet_start": subscription.quiet_start, "quiet_end": subscription.quiet_end,
                "enabled": subscription.enabled,
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        self.add_scope_fields(targets, by_name=True)
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
        target = self.scope_target()
        data = self.values_but_scope("tenant")
        data["scope_name"] = getattr(target, SCOPE_NAME_FIELD[data["scope_kind"]]) if target else ""
        data["channel"] = data["channel"].pk
        data["rules"] = [rule.pk for rule in data["rules"]]
        return data
