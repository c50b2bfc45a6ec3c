"""Query-parameter filters of the tenant, membership and quota lists (django-filter).

Tenants are filtered by id or slug as plain values, never checked against the tenants
that exist: a tenant the caller may not see gives an empty list, not an error that would
tell it exists.
"""

from __future__ import annotations

import django_filters
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from quotas.choices import BudgetPeriod, Role
from quotas.models import Membership, Quota, Tenant
from quotas.tenancy import accounts


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


class UserFilterSet(django_filters.FilterSet):
    search = django_filters.CharFilter(
        method="filter_search", max_length=150,
        help_text=_("Only users whose user name, name or e-mail contains each of these words."),
    )  # fmt: skip
    username = django_filters.CharFilter(
        max_length=150, help_text=_("Only the user with this user name.")
    )
    # Strict: anything but "true" or "false" is a 400, not silently no filter.
    is_active = django_filters.ChoiceFilter(
        choices=(("true", _("yes")), ("false", _("no"))), method="filter_active",
        help_text=_("true: only active users; false: only deactivated ones."),
    )  # fmt: skip

    class Meta:
        model = get_user_model()
        fields = ["search", "username", "is_active"]

    def filter_search(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(pk__in=accounts.search_users(value).values("pk"))

    def filter_active(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(is_active=value == "true")
