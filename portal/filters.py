"""Filters the apps' filter sets share."""

from __future__ import annotations

import datetime as dt

import django_filters
from django_filters.fields import IsoDateTimeField


class InstantField(IsoDateTimeField):
    def to_python(self, value):
        value = super().to_python(value)
        # ISO 8601 allows offsets up to ±23:59, PostgreSQL only ±15:59: the same instant in
        # UTC is what the query needs (a "+16:00" was a 500).
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            return value.astimezone(dt.UTC)
        return value


class InstantFilter(django_filters.IsoDateTimeFilter):
    """An ISO 8601 date-time, any offset, compared as an instant."""

    field_class = InstantField
