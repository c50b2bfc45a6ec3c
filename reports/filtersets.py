"""Query-parameter filters of the idle report (the page and the API use the same set).

Tenants, pools and nodes are chosen from the reader's lists: the page names them in
selects, the API takes their ids (the pool's slug). Anything else is a 400 naming the
filter, the same for a tenant that does not exist and for one the reader does not see,
so the answer tells nothing of another tenant.
"""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.utils.functional import lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from agents.models import Node
from pools.models import Pool
from quotas.models import Tenant
from reports import permissions
from reports.models import AllocationIdle

ORDERINGS = (
    ("wasted_gpu_hours", "wasted"),
    ("idle_minutes", "idle_minutes"),
    ("tenant_id", "tenant"),
    ("pool__name", "pool"),
    ("node_id", "node"),
    ("allocation_id", "allocation"),
)


# What the sort menu says; the API's values stay the ORDERINGS' second names.
ORDERING_LABELS = {
    "wasted_gpu_hours": _("Wasted GPU-hours"), "idle_minutes": _("Idle minutes"),
    "tenant_id": _("Tenant"), "pool__name": _("Pool"), "node_id": _("Node"),
    "allocation_id": _("Allocation"),
}  # fmt: skip


def _descending(label: str) -> str:
    return gettext("%s (descending)") % label


class Ordering(django_filters.OrderingFilter):
    """django-filter's menu, its "(descending)" ours: its own has no Simplified Chinese,
    and it formats the words once, at import, in whatever language is active then."""

    def build_choices(self, fields, labels):
        ascending = [(param, labels[field]) for field, param in fields.items()]
        descending = [(f"-{param}", lazy(_descending, str)(label)) for param, label in ascending]
        return [choice for pair in zip(ascending, descending, strict=True) for choice in pair]


# Strict booleans: anything but "true" or "false" is a 400, not silently no filter.
BOOLEAN = (("true", _("yes")), ("false", _("no")))


def _tenants(request) -> QuerySet[Tenant]:
    """The tenants whose rows the reader may see (all for who sees everything)."""
    if request is None or not request.user.is_authenticated:
        return Tenant.objects.none()
    ids = permissions.visible_tenant_ids(request.user)
    tenants = Tenant.objects.all() if ids is None else Tenant.objects.filter(pk__in=ids)
    return tenants.order_by("name")


class IdChoiceFilter(django_filters.ModelChoiceFilter):
    """One of the listed rows, matched on a plain id column (the scan's tenant_id and
    node_id are ids, not foreign keys)."""

    def filter(self, qs, value):
        return super().filter(qs, value.pk if value is not None else value)


class AllocationIdleFilterSet(django_filters.FilterSet):
    tenant = IdChoiceFilter(
        field_name="tenant_id", queryset=_tenants, label=_("Tenant"),
        empty_label=_("All tenants"), help_text=_("Only this tenant's rows (its id)."),
        error_messages={"invalid_choice": _("Not one of the tenants you see.")},
    )  # fmt: skip
    pool = django_filters.ModelChoiceFilter(
        field_name="pool", to_field_name="slug", queryset=Pool.objects.order_by("name"),
        label=_("Pool"), empty_label=_("All pools"),
        help_text=_("Only this pool's rows (its slug)."),
        error_messages={"invalid_choice": _("No pool has this slug.")},
    )  # fmt: skip
    node = IdChoiceFilter(
        field_name="node_id", queryset=Node.objects.order_by("name"), label=_("Node"),
        empty_label=_("All nodes"), help_text=_("Only this node's rows (its id)."),
        error_messages={"invalid_choice": _("No node has this id.")},
    )  # fmt: skip
    idle = django_filters.ChoiceFilter(
        choices=BOOLEAN, method="filter_boolean", label=_("Idle"), empty_label=_("Any"),
        help_text=_("Only idle (true) or busy (false) rows."),
    )  # fmt: skip
    over_provisioned = django_filters.ChoiceFilter(
        choices=BOOLEAN, method="filter_boolean", label=_("Over-provisioned"),
        empty_label=_("Any"),
        help_text=_("Only allocations holding more than twice what they used (true)."),
    )  # fmt: skip
    ordering = Ordering(
        fields=ORDERINGS, field_labels=ORDERING_LABELS, label=_("Sort by"),
        empty_label=_("Idle first, most wasted"),
        help_text=_("Sort by wasted, idle_minutes, tenant, pool, node."),
    )  # fmt: skip

    class Meta:
        model = AllocationIdle
        fields = ["tenant", "pool", "node", "idle", "over_provisioned"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for field in self.form.fields.values():
            field.widget.attrs.setdefault(
                "class", "form-select" if hasattr(field, "choices") else "form-control"
            )

    def filter_boolean(self, queryset, name: str, value: str):
        return queryset.filter(**{name: value == "true"})
