"""Query-parameter filters of the pool, pool card and allocation lists (django-filter)."""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from agents.choices import GpuVendor
from pools.choices import AgentSync, AllocationState, PlacementPolicy
from pools.models import Allocation, Pool, PoolCard


class PoolFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(
        lookup_expr="icontains", help_text=_("Only pools whose name contains this text.")
    )
    slug = django_filters.CharFilter(help_text=_("The pool with this slug."))
    policy = django_filters.ChoiceFilter(
        choices=PlacementPolicy.choices, help_text=_("Only pools placing this way.")
    )

    class Meta:
        model = Pool
        fields = ["name", "slug", "policy"]


class PoolCardFilterSet(django_filters.FilterSet):
    pool = django_filters.NumberFilter(field_name="pool_id", help_text=_("Only this pool's cards."))
    node = django_filters.CharFilter(
        field_name="gpu__node__name", help_text=_("Only the cards of the node with this name.")
    )
    model = django_filters.CharFilter(field_name="gpu__model", help_text=_("Only this model."))
    vendor = django_filters.ChoiceFilter(
        field_name="gpu__vendor",
        choices=GpuVendor.choices,
        help_text=_("Only this vendor's cards."),
    )
    free = django_filters.BooleanFilter(
        method="filter_free", help_text=_("true: only cards with no vGPU; false: only busy ones.")
    )

    class Meta:
        model = PoolCard
        fields = ["pool", "node", "model", "vendor", "free"]

    def filter_free(self, queryset, name: str, value: bool):
        return queryset.filter(slices=0) if value else queryset.filter(slices__gt=0)


class AllocationFilterSet(django_filters.FilterSet):
    pool = django_filters.NumberFilter(field_name="pool_id", help_text=_("Only this pool's vGPUs."))
    lease = django_filters.NumberFilter(field_name="lease_id", help_text=_("Only this lease's."))
    gpu = django_filters.NumberFilter(field_name="gpu_id", help_text=_("Only this card's."))
    node = django_filters.CharFilter(
        field_name="gpu__node__name", help_text=_("Only those on the node with this name.")
    )
    state = django_filters.ChoiceFilter(
        choices=AllocationState.choices, help_text=_("Only vGPUs in this state.")
    )
    agent_sync = django_filters.ChoiceFilter(
        choices=AgentSync.choices, help_text=_("Only vGPUs the agent holds (or not) so.")
    )

    class Meta:
        model = Allocation
        fields = ["pool", "lease", "gpu", "node", "state", "agent_sync"]
