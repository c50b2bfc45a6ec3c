"""Forms of the requests pages. Type and range checks only: the rules (membership, the
pool open to the tenant, quota, card size, budget) are the services', whose field-level
ValidationError each form shows on its fields (``portal.forms.add_service_errors``)."""

from __future__ import annotations

import re

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from agents.choices import GpuVendor, vendor_label
from pools.models import Pool, PoolCard
from portal.forms import GiBField
from portal.templatetags.portal_ui import sep
from quotas.models import Quota, Tenant
from quotas.permissions import tenants_of

LABEL_PAIR = re.compile(r"^[A-Za-z0-9_.\-/]{1,63}=[A-Za-z0-9_.\-]{0,63}$")


class GpuRequestForm(forms.Form):
    SIZES = (("slice", _("A slice of a card")), ("whole", _("Whole cards")))

    tenant = forms.ModelChoiceField(
        label=_("Tenant"), queryset=Tenant.objects.none(),
        error_messages={"invalid_choice": _("Choose one of your tenants.")},
    )  # fmt: skip
    pool = forms.ModelChoiceField(
        label=_("Pool"), queryset=Pool.objects.none(),
        error_messages={"invalid_choice": _("Choose a pool open to your tenants.")},
    )  # fmt: skip
    count = forms.IntegerField(label=_("vGPUs"), min_value=1, max_value=64, initial=1)
    size = forms.ChoiceField(label=_("Size"), choices=SIZES, initial="slice",
                             widget=forms.RadioSelect)  # fmt: skip
    compute_pct = forms.IntegerField(
        label=_("Compute per vGPU (%)"), min_value=1, max_value=100, initial=50, required=False
    )
    # Typed in GiB, cleaned to the MiB the service and the API count.
    memory_mib = GiBField(
        label=_("Memory per vGPU (GiB)"), min_mib=1, max_mib=10_000_000, initial=8192,
        required=False,
    )  # fmt: skip
    gpu_model = forms.CharField(
        label=_("GPU model"), max_length=128, required=False,
        widget=forms.TextInput(attrs={"list": "gpu-models"}),
        help_text=_("Exactly as the cards report it (their vendor's models are offered); "
                    "empty: any."),
    )  # fmt: skip
    gpu_vendor = forms.ChoiceField(
        label=_("GPU vendor"), required=False, choices=[("", _("Any vendor")), *GpuVendor.choices],
        help_text=_("Only this vendor's cards. Empty: any vendor."),
    )  # fmt: skip
    node_name = forms.CharField(
        label=_("Node"), max_length=255, required=False, help_text=_("Empty: any node.")
    )
    node_labels = forms.CharField(
        label=_("Node labels"), max_length=1000, required=False,
        help_text=_("key=value pairs separated by commas; the node must carry all."),
    )  # fmt: skip
    same_node = forms.BooleanField(label=_("All on one node"), required=False)
    duration_hours = forms.IntegerField(
        label=_("Duration (hours)"), min_value=1, max_value=24 * 366, required=False,
        help_text=_("Empty: until you release it."),
    )  # fmt: skip
    reason = forms.CharField(
        label=_("Reason"), max_length=2000, widget=forms.Textarea(attrs={"rows": 3})
    )

    def __init__(self, *args, user, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        tenants = tenants_of(user)
        self.fields["tenant"].queryset = tenants
        pools = Pool.objects.filter(
            pk__in=Quota.objects.filter(tenant__in=tenants).values("pool_id")
        )
        self.fields["pool"].queryset = pools
        # Each pool named with its cards' vendors, and the models on offer with theirs: a
        # mixed fleet's pools say which is Ascend's, which Hygon's.
        kinds = (
            PoolCard.objects.filter(pool__in=pools)
            .values_list("pool_id", "gpu__vendor", "gpu__model")
            .distinct()
        )
        vendors: dict[int, set[str]] = {}
        models: set[tuple[str, str]] = set()
        for pool_id, vendor, model in kinds:
            vendors.setdefault(pool_id, set()).add(vendor)
            models.add((vendor, model))
        self.fields["pool"].label_from_instance = lambda pool: _pool_label(
            pool, vendors.get(pool.pk) or ({pool.match_vendor} - {""})
        )
        self.model_options = [
            (model, f"{vendor_label(vendor)} · {model}") for vendor, model in sorted(models)
        ]

    def clean_node_labels(self) -> dict[str, str]:
        text = self.cleaned_data.get("node_labels", "").strip()
        pairs = [p.strip() for p in text.split(",") if p.strip()]
        if len(pairs) > 16 or any(not LABEL_PAIR.match(p) for p in pairs):
            raise ValidationError(_("Write key=value pairs separated by commas (at most 16)."))
        return dict(p.split("=", 1) for p in pairs)

    def clean(self) -> dict:
        data = super().clean()
        if data.get("size") == "slice":
            for field in ("compute_pct", "memory_mib"):
                if data.get(field) is None and field not in self.errors:
                    self.add_error(field, _("Give the slice's size."))
        return data

    def ask(self) -> dict:
        """The service's keyword arguments (``create_request`` sizes a whole card)."""
        data = self.cleaned_data
        return {
            "tenant": data["tenant"], "pool": data["pool"], "count": data["count"],
            "whole_card": data["size"] == "whole",
            "compute_pct": data["compute_pct"], "memory_mib": data["memory_mib"],
            "gpu_model": data["gpu_model"], "gpu_vendor": data["gpu_vendor"],
            "node_name": data["node_name"],
            "node_labels": data["node_labels"], "same_node": data["same_node"],
            "duration_hours": data["duration_hours"], "reason": data["reason"],
        }  # fmt: skip


def _pool_label(pool: Pool, vendors: set[str]) -> str:
    if not vendors:
        return pool.name
    return f"{pool.name} ({sep('comma').join(sorted(vendor_label(v) for v in vendors))})"


class DecisionForm(forms.Form):
    comment = forms.CharField(label=_("Comment"), max_length=2000, required=False)


class ExtendForm(forms.Form):
    hours = forms.IntegerField(label=_("More hours"), min_value=1, max_value=24 * 366)


class ResizeForm(forms.Form):
    compute_pct = forms.IntegerField(label=_("Compute per vGPU (%)"), min_value=1, max_value=100)
    memory_mib = GiBField(label=_("Memory per vGPU (GiB)"), min_mib=1, max_mib=10_000_000)
