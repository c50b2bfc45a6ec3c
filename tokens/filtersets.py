"""Query-parameter filters of the token and service-account lists (django-filter)."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from tokens.choices import Scope
from tokens.models import ApiToken, ServiceAccount


class ApiTokenFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(
        lookup_expr="icontains", max_length=100,
        help_text=_("Only tokens whose name contains this text."),
    )  # fmt: skip
    scope = django_filters.ChoiceFilter(choices=Scope.choices, help_text=_("Only this scope."))
    active = django_filters.BooleanFilter(
        method="filter_active",
        help_text=_("true: only tokens that work now; false: only revoked or expired ones."),
    )
    ordering = django_filters.OrderingFilter(
        fields=("created", "expires_at", "last_used_at", "name"), label=_("Sort by"),
        help_text=_("Sort by created, expires_at, last_used_at or name (- for descending)."),
    )  # fmt: skip

    class Meta:
        model = ApiToken
        fields = ["name", "scope", "active"]

    def filter_active(self, queryset: QuerySet, name: str, value: bool | None) -> QuerySet:
        if value is None:
            return queryset
        now = timezone.now()
        live = Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        return queryset.filter(live) if value else queryset.exclude(live)


class ServiceAccountFilterSet(django_filters.FilterSet):
    tenant = django_filters.NumberFilter(
        field_name="tenant_id", min_value=1,
        help_text=_("Only the service accounts of this tenant (id)."),
    )  # fmt: skip
    tenant_slug = django_filters.CharFilter(
        field_name="tenant__slug", max_length=100,
        help_text=_("Only the service accounts of the tenant with this slug."),
    )  # fmt: skip
    name = django_filters.CharFilter(
        lookup_expr="icontains", max_length=100,
        help_text=_("Only service accounts whose name contains this text."),
    )  # fmt: skip
    active = django_filters.BooleanFilter(
        field_name="disabled_at", lookup_expr="isnull",
        help_text=_("true: only enabled service accounts; false: only disabled ones."),
    )  # fmt: skip
    ordering = django_filters.OrderingFilter(
        fields=("name", "created"), label=_("Sort by"),
        help_text=_("Sort by name or created (- for descending)."),
    )  # fmt: skip

    class Meta:
        model = ServiceAccount
        fields = ["tenant", "tenant_slug", "name", "active"]
