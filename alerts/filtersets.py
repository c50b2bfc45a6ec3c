"""Query-parameter filters of the channel, event and rule lists."""

from __future__ import annotations

import django_filters

from alerts.choices import ChannelKind, Condition, EventState, Severity
from alerts.models import Channel, Event, Rule
from portal.filters import InstantFilter


class ChannelFilterSet(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=ChannelKind.choices)
    enabled = django_filters.BooleanFilter()
    tenant = django_filters.NumberFilter(field_name="tenant_id")

    class Meta:
        model = Channel
        fields = ["kind", "enabled", "tenant"]


class EventFilterSet(django_filters.FilterSet):
    """The event history's filters (the page's and the API's)."""

    state = django_filters.MultipleChoiceFilter(choices=EventState.choices)
    severity = django_filters.MultipleChoiceFilter(choices=Severity.choices)
    rule = django_filters.NumberFilter(field_name="rule_id")
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    scope = django_filters.CharFilter(lookup_expr="icontains", max_length=255)
    # The node's name and the pool's slug, as the event's labels carry them.
    node = django_filters.CharFilter(field_name="labels__node", max_length=255)
    pool = django_filters.CharFilter(field_name="labels__pool", max_length=100)
    since = InstantFilter(field_name="started_at", lookup_expr="gte")
    until = InstantFilter(field_name="started_at", lookup_expr="lt")

    class Meta:
        model = Event
        fields = ["state", "severity", "rule", "tenant", "node", "pool", "scope", "since", "until"]


class RuleFilterSet(django_filters.FilterSet):
    condition = django_filters.ChoiceFilter(choices=Condition.choices)
    enabled = django_filters.BooleanFilter()
    severity = django_filters.ChoiceFilter(choices=Severity.choices)

    class Meta:
        model = Rule
        fields = ["condition", "enabled", "severity"]
