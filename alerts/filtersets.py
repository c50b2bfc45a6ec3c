"""Query-parameter filters of the channel list."""

from __future__ import annotations

import django_filters

from alerts.choices import ChannelKind
from alerts.models import Channel


class ChannelFilterSet(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=ChannelKind.choices)
    enabled = django_filters.BooleanFilter()
    tenant = django_filters.NumberFilter(field_name="tenant_id")

    class Meta:
        model = Channel
        fields = ["kind", "enabled", "tenant"]
