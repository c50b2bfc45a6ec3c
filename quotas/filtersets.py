"""Query-parameter filters of the tenant, membership and quota lists (django-filter).

Tenants are filtered by id or slug as plain values, never checked against the tenants
that exist: a tenant the caller may not see gives an empty list, not an error that would
tell it exists.
"""

from __future__ import annotations

import django_filters
from django.utils.translation import gettext_lazy as _

from quotas.choices import BudgetPeriod, Role
from quotas.models import Membership, Quota, Tenant


class TenantFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(
        lookup_expr="icontains", max_length=100,
        help_text=_("Only tenants whose name contains this text."),
    )  # fmt: skip
    slug = django_filters.CharFilter(max_length=100, help_text=_("Only the tenant with this slug."))

    class Meta:
        model = Tenant
        fields = ["name", "slug"]


class MembershipFilterSet(django_filters.FilterSet):
    tenant = django_filters.NumberFilter(
        field_name="tenant_id", min_value=1, help_text=_("Only the members of this tenant (id).")
    )
    tenant_slug = django_filters.CharFilter(
        field_name="tenant__slug", max_length=100,
        help_text=_("Only the members of the tenant with this slug."),
    )  # fmt: skip
    username = django_filters.CharFilter(
        field_name="user__username", max_length=150,
        help_text=_("Only the memberships of the user with this name."),
    )  # fmt: skip
    role = django_filters.ChoiceFilter(choices=Role.choices, help_text=_("Only this role."))

    class Meta:
        model = Membership
        fields = ["tenant", "tenant_slug", "username", "role"]


class QuotaFilterSet(django_filters.FilterSet):
    tenant = django_filters.NumberFilter(
        field_name="tenant_id", min_value=1, help_text=_("Only the quotas of this tenant (id).")
    )
    tenant_slug = django_filters.CharFilter(
        field_name="tenant__slug", max_length=100,
        help_text=_("Only the quotas of the tenant with this slug."),
    )  # fmt: skip
    pool = django_filters.NumberFilter(
        field_name="pool_id", min_value=1, help_text=_("Only the quotas in this pool (id).")
    )
    budget_period = django_filters.ChoiceFilter(
        choices=BudgetPeriod.choices, help_text=_("Only quotas with this GPU-hour budget period.")
    )

    class Meta:
        model = Quota
        fields = ["tenant", "tenant_slug", "pool", "budget_period"]
