"""The reclaim forms on the idle report (appeal, decide an appeal, exempt a lease) and the
platform admins' forms for reclaim policies and unit prices. The services validate again;
these give the page its field errors."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from reports.models import ReclaimPolicy, UnitPrice
from reports.policies import POLICY_FIELDS, PRICE_FIELDS
from reports.services import MAX_TEXT


class AppealForm(forms.Form):
    reason = forms.CharField(label=_("Why keep it"), max_length=MAX_TEXT)


class AppealDecisionForm(forms.Form):
    grant = forms.TypedChoiceField(
        label=_("Decision"), choices=[("1", _("Grant")), ("0", _("Refuse"))],
        coerce=lambda v: v == "1",
    )  # fmt: skip
    comment = forms.CharField(label=_("Comment"), max_length=MAX_TEXT, required=False)
    until = forms.DateTimeField(label=_("Exempt until"), required=False)


class ExemptionForm(forms.Form):
    reason = forms.CharField(label=_("Reason"), max_length=MAX_TEXT)
    ends_at = forms.DateTimeField(label=_("Ends at"))


def _kit_numbers(form: forms.Form, names: tuple[str, ...]) -> None:
    """The browser's own hints from the model's bounds (the server checks them again)."""
    for name in names:
        field = form.fields[name]
        if getattr(field, "min_value", None) is not None:
            field.widget.attrs["min"] = field.min_value
        if getattr(field, "max_value", None) is not None:
            field.widget.attrs["max"] = field.max_value


class ReclaimPolicyForm(forms.Form):
    """A pool's thresholds and whether it reclaims; the pool is chosen once."""

    def __init__(self, *args, policy: ReclaimPolicy | None = None, **kwargs) -> None:
        if policy is not None:
            kwargs.setdefault("initial", {k: getattr(policy, k) for k in POLICY_FIELDS})
        super().__init__(*args, **kwargs)
        if policy is None:
            self.fields["pool"] = forms.ModelChoiceField(
                label=_("Pool"),
                queryset=Pool.objects.filter(reclaim_policy__isnull=True).order_by("name"),
                help_text=_("The pool this policy is for; each pool has at most one."),
            )
        self.fields.update(forms.fields_for_model(ReclaimPolicy, fields=POLICY_FIELDS))
        _kit_numbers(self, POLICY_FIELDS)


class UnitPriceForm(forms.Form):
    """A pool's prices, or the default's; the pool is chosen once."""

    def __init__(self, *args, price: UnitPrice | None = None, **kwargs) -> None:
        if price is not None:
            kwargs.setdefault("initial", {k: getattr(price, k) for k in PRICE_FIELDS})
        super().__init__(*args, **kwargs)
        if price is None:
            self.fields["pool"] = forms.ModelChoiceField(
                label=_("Pool"), required=False,
                queryset=Pool.objects.filter(unit_price__isnull=True).order_by("name"),
                empty_label=_("Default: every pool without a price of its own"),
                help_text=_("Each pool has at most one price, and there is one default."),
            )  # fmt: skip
        self.fields.update(forms.fields_for_model(UnitPrice, fields=PRICE_FIELDS))
        _kit_numbers(self, PRICE_FIELDS)
