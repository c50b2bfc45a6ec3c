"""Query-parameter filters of the audit log, one set for the page and the API.

A bad value (a date that is no date, a tenant that is no number) is a 400 naming the
parameter in the API and an error beside the field on the page.
"""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from django.utils.translation import gettext_lazy as _

from audit.models import AuditEntry
from portal.filters import InstantFilter

DAY = forms.DateInput(format="%Y-%m-%d", attrs={"type": "date"})


class AuditEntryFilterSet(django_filters.FilterSet):
    actor = django_filters.CharFilter(
        field_name="actor_name",
        lookup_expr="iexact",
        max_length=150,
        label=_("Who"),
        help_text=_("Only changes made by the user with this name."),
    )
    actor_id = django_filters.NumberFilter(
        min_value=1, label=_("User id"), help_text=_("Only changes made by the user with this id.")
    )
    action = django_filters.CharFilter(
        method="filter_action",
        max_length=64,
        widget=forms.TextInput(attrs={"list": "audit-actions"}),
        label=_("Action"),
        help_text=_(
            "Only this action (node.updated), or every action on one kind of object (node)."
        ),
    )
    target_type = django_filters.CharFilter(
        max_length=64,
        label=_("Object type"),
        help_text=_("Only entries about this kind of object (auth.user, quotas.quota)."),
    )
    target_id = django_filters.CharFilter(
        max_length=64,
        label=_("Object id"),
        help_text=_("Only entries about the object with this id."),
    )
    tenant = django_filters.NumberFilter(
        field_name="tenant_id",
        min_value=1,
        label=_("Tenant"),
        help_text=_("Only entries of the tenant with this id."),
    )
    since = django_filters.DateFilter(
        field_name="at",
        widget=DAY,
        lookup_expr="date__gte",
        label=_("From"),
        help_text=_("Only entries from this day on (YYYY-MM-DD, in the portal's time zone)."),
    )
    until = django_filters.DateFilter(
        field_name="at",
        widget=DAY,
        lookup_expr="date__lte",
        label=_("Until"),
        help_text=_("Only entries up to and including this day (YYYY-MM-DD)."),
    )
    after = InstantFilter(
        field_name="at",
        lookup_expr="gte",
        label=_("At or after"),
        help_text=_("Only entries at or after this moment (ISO 8601)."),
    )
    before = InstantFilter(
        field_name="at",
        lookup_expr="lt",
        label=_("Earlier than"),
        help_text=_("Only entries before this moment (ISO 8601)."),
    )
    ordering = django_filters.OrderingFilter(
        fields=(("at", "at"),),
        label=_("Order"),
        help_text=_("at: oldest first; -at: newest first (the default)."),
    )

    class Meta:
        model = AuditEntry
        fields = ["actor", "actor_id", "action", "target_type", "target_id", "tenant"]

    def filter_action(self, queryset: QuerySet[AuditEntry], name: str, value: str):
        value = value.strip()
        return queryset.filter(Q(action=value) | Q(action__startswith=value + "."))

    def filter_queryset(self, queryset: QuerySet[AuditEntry]) -> QuerySet[AuditEntry]:
        queryset = super().filter_queryset(queryset)
        # Entries of the same moment in the order they were written, whichever way time runs.
        oldest_first = "at" in (self.form.cleaned_data.get("ordering") or [])
        return queryset.order_by("at", "id") if oldest_first else queryset.order_by("-at", "-id")
