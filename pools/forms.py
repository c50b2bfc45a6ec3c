"""Forms for pools and their cards. They only carry input; pools.configuration holds the rules."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.choices import GpuVendor
from pools.choices import PlacementPolicy
from pools.models import MAX_RATIO, Pool

MAX_TEXT = 8000


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace(";", "\n").splitlines() if line.strip()]


class PoolForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    slug = forms.SlugField(
        label=_("Slug"),
        max_length=100,
        help_text=_("The pool's name in URLs and the API."),
        widget=forms.TextInput(attrs={"data-slug-from": "name"}),  # static/portal/base.js
    )
    description = forms.CharField(
        label=_("Description"), required=False, max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
    )  # fmt: skip
    match_models = forms.CharField(
        label=_("GPU models"), required=False, max_length=MAX_TEXT,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "NVIDIA H100 80GB HBM3"}),
        help_text=_("One model per line, as the driver names it. Empty: any model."),
    )  # fmt: skip
    match_vendor = forms.ChoiceField(
        label=_("Vendor"), required=False, choices=[("", _("Any vendor")), *GpuVendor.choices],
        help_text=_("Only this vendor's cards join. Empty: any vendor."),
    )  # fmt: skip
    match_labels = forms.CharField(
        label=_("Node labels"), required=False, max_length=MAX_TEXT,
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "rack=r1\nzone=a"}),
        help_text=_("One key=value per line: the card's node must carry every one."),
    )  # fmt: skip
    match_by_rules = forms.BooleanField(
        label=_("Add matching cards automatically"), required=False, initial=True,
        help_text=_("Cards that match the rules and are in no other pool join, now and as "
                    "they are discovered."),
    )  # fmt: skip
    compute_ratio = forms.DecimalField(
        label=_("Compute oversubscription"), min_value=Decimal(1), max_value=MAX_RATIO,
        max_digits=4, decimal_places=2, initial=Decimal(1),
        help_text=_("1.0 = none; 2.0 lets slices together take twice a card's compute."),
    )  # fmt: skip
    memory_ratio = forms.DecimalField(
        label=_("Memory oversubscription"), min_value=Decimal(1), max_value=MAX_RATIO,
        max_digits=4, decimal_places=2, initial=Decimal(1),
        help_text=_("1.0 = none. Above it, slices may together ask more memory than the "
                    "card has: watch the risk list."),
    )  # fmt: skip
    policy = forms.ChoiceField(
        label=_("Placement policy"), choices=PlacementPolicy.choices,
        initial=PlacementPolicy.BINPACK,
    )  # fmt: skip

    def __init__(self, *args, pool: Pool | None = None, **kwargs) -> None:
        if pool is not None:
            kwargs.setdefault("initial", {
                "name": pool.name, "slug": pool.slug, "description": pool.description,
                "match_models": "\n".join(pool.match_models),
                "match_vendor": pool.match_vendor,
                "match_labels": "\n".join(f"{k}={v}" for k, v in pool.match_labels.items()),
                "match_by_rules": pool.match_by_rules, "compute_ratio": pool.compute_ratio,
                "memory_ratio": pool.memory_ratio, "policy": pool.policy,
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        self.pool = pool

    def clean_match_models(self) -> list[str]:
        return _lines(self.cleaned_data["match_models"])

    def clean_match_labels(self) -> dict[str, str]:
        labels = {}
        for line in _lines(self.cleaned_data["match_labels"]):
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise forms.ValidationError(
                    gettext("Write each label as key=value: %(line)s") % {"line": line[:80]}
                )
            labels[key.strip()] = value.strip()
        return labels

    def values(self) -> dict:
        return dict(self.cleaned_data)


class PoolCardsForm(forms.Form):
    """Cards to add to a pool: those in no pool yet."""

    gpus = forms.TypedMultipleChoiceField(label=_("Cards"), coerce=int, choices=())

    def __init__(self, *args, choices: list[tuple[int, str]], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["gpus"].choices = choices
        self.fields["gpus"].widget.attrs["size"] = min(12, max(4, len(choices)))
