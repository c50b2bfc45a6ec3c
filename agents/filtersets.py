"""Query-parameter filters of the node and GPU lists (django-filter).

The API's list views name these as ``filterset_class``; a bad value is a 400 naming the
parameter, and drf-spectacular lists each filter, with its choices, in the schema.
"""

from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import Exact
from django.utils.translation import gettext_lazy as _

from agents.choices import GpuHealth, GpuVendor, NodeSource, NodeState
from agents.models import GPU, Node
from agents.registration import parse_labels


def validate_label_selector(raw: str) -> None:
    """``key`` or ``key=value``, by the rules labels are registered with."""
    key, _sep, value = raw.partition("=")
    try:
        parse_labels({key: value})
    except ValueError as exc:
        # As a parameter: django-filter %-formats the message, and a label may hold a "%".
        raise ValidationError("%(reason)s", code="invalid", params={"reason": exc}) from None


class NodeFilterSet(django_filters.FilterSet):
    state = django_filters.ChoiceFilter(
        choices=NodeState.choices, help_text=_("Only nodes in this state.")
    )
    source = django_filters.ChoiceFilter(
        choices=NodeSource.choices,
        help_text=_("Only nodes read this way: through our agent, or through Prometheus."),
    )
    name = django_filters.CharFilter(
        lookup_expr="icontains", help_text=_("Only nodes whose name contains this text.")
    )
    label = django_filters.CharFilter(
        method="filter_label",
        validators=[validate_label_selector],
        help_text=_("Only nodes with this label: a name (key), or key=value for its value."),
    )
    vendor = django_filters.ChoiceFilter(
        choices=GpuVendor.choices,
        method="filter_vendor",
        help_text=_("Only nodes holding at least one card of this vendor."),
    )

    class Meta:
        model = Node
        fields = ["state", "source", "name", "label", "vendor"]

    def filter_vendor(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        # A subquery rather than a join: a node with eight such cards is listed once.
        return queryset.filter(pk__in=GPU.objects.filter(vendor=value).values("node_id"))

    def filter_label(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        key, sep, wanted = value.partition("=")
        if not sep:
            return queryset.filter(labels__has_key=key)
        # The key as one JSON key, never parsed as a lookup path (a key may hold "__").
        return queryset.filter(Exact(KeyTextTransform(key, "labels"), wanted))


class GPUFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(
        field_name="node__name", help_text=_("Only the cards of the node with this name.")
    )
    model = django_filters.CharFilter(
        help_text=_("Only cards of this model, as the driver names it (NVIDIA H100 80GB HBM3).")
    )
    vendor = django_filters.ChoiceFilter(
        choices=GpuVendor.choices, help_text=_("Only cards of this vendor.")
    )
    health = django_filters.ChoiceFilter(
        choices=GpuHealth.choices, help_text=_("Only cards in this health.")
    )

    class Meta:
        model = GPU
        fields = ["node", "model", "vendor", "health"]
