"""Query-parameter filters of the idle report (the page and the API use the same set).

Tenants, pools and nodes are plain values, never checked against what exists: one the
caller may not see gives an empty list, not an error that would tell it exists.
"""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from reports.models import AllocationIdle

ORDERINGS = (
    ("wasted_gpu_hours", "wasted"),
    ("idle_minutes", "idle_minutes"),
    ("tenant_id", "tenant"),
    ("pool__name", "pool"),
    ("node_id", "node"),
    ("allocation_id", "allocation"),
)


# Strict booleans: anything but "true" or "false" is a 400, not silently no filter.
BOOLEAN = (("true", _("yes")), ("false", _("no")))


class AllocationIdleFilterSet(django_filters.FilterSet):
    tenant = django_filters.NumberFilter(
        field_name="tenant_id", min_value=1, label=_("Tenant (id)"),
        help_text=_("Only this tenant's rows (id)."),
    )  # fmt: skip
    pool = django_filters.CharFilter(
        field_name="pool__slug", max_length=100, label=_("Pool (slug)"),
        help_text=_("Only this pool's rows (slug)."),
    )  # fmt: skip
    node = django_filters.NumberFilter(
        field_name="node_id", min_value=1, label=_("Node (id)"),
        help_text=_("Only this node's rows (id)."),
    )  # fmt: skip
    idle = django_filters.ChoiceFilter(
        choices=BOOLEAN, method="filter_boolean", label=_("Idle"),
        help_text=_("Only idle (true) or busy (false) rows."),
    )  # fmt: skip
    over_provisioned = django_filters.ChoiceFilter(
        choices=BOOLEAN, method="filter_boolean", label=_("Over-provisioned"),
        help_text=_("Only allocations holding more than twice what they used (true)."),
    )  # fmt: skip
    ordering = django_filters.OrderingFilter(
        fields=ORDERINGS, label=_("Sort by"),
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
