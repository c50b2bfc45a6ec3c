"""Query-parameter filters of the GPU request list (django-filter)."""

from __future__ import annotations

from django_filters import rest_framework as filters

from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests.permissions import decidable_requests


class GpuRequestFilterSet(filters.FilterSet):
    state = filters.MultipleChoiceFilter(choices=RequestState.choices)
    mine = filters.BooleanFilter(method="filter_mine", label="Only my own requests")
    waiting_for_me = filters.BooleanFilter(
        method="filter_waiting", label="Only requests I may decide now"
    )

    class Meta:
        model = GpuRequest
        fields = ["state", "tenant", "pool"]

    def filter_mine(self, queryset, name, value):
        return queryset.filter(requester=self.request.user) if value else queryset

    def filter_waiting(self, queryset, name, value):
        if not value:
            return queryset
        return queryset & decidable_requests(self.request.user)
