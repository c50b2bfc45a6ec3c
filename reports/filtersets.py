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


def _true(value: str) -> bool:
    return value == "true"


class AllocationIdleFilterSet(django_filters.FilterSet):
    tenant = django_filters.NumberFilter(
        field_name="tenant_id", min_value=1, help_text=_("Only this tenant's rows (id).")
    )
    pool = django_filters.CharFilter(
        field_name="pool__slug", max_length=100, help_text=_("Only this pool's rows (slug).")
    )
    node = django_filters.NumberFilter(
        field_name="node_id", min_value=1, help_text=_("Only this node's rows (id).")
    )
    idle = django_filters.TypedChoiceFilter(
        choices=BOOLEAN, coerce=_true, help_text=_("Only idle (true) or busy (false) rows.")
    )
    over_provisioned = django_filters.TypedChoiceFilter(
        choices=BOOLEAN, coerce=_true,
        help_text=_("Only allocations holding more than twice what they used (true)."),
    )  # fmt: skip
    ordering = django_filters.OrderingFilter(
        fields=ORDERINGS, help_text=_("Sort by wasted, idle_minutes, tenant, pool, node.")
    )

    class Meta:
        model = AllocationIdle
        fields = ["tenant", "pool", "node", "idle", "over_provisioned"]
