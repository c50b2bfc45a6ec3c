"""The API's pages: ``limit`` and ``offset`` checked, so odd values are a 400 naming them.

DRF's LimitOffsetPagination falls back to the default on a bad ``limit`` and passes any
``offset`` to SQL, where one past bigint was a 500.
"""

from __future__ import annotations

from typing import Any

from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_LIMIT = 1000
MAX_OFFSET = 2**63 - 1  # PostgreSQL's OFFSET is a bigint


def _bounded_int(request: Request, name: str, low: int, high: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValidationError({name: [_("A whole number is required.")]}) from None
    if not low <= value <= high:
        message = _("Ensure this value is between %(low)s and %(high)s.")
        raise ValidationError({name: [message % {"low": low, "high": high}]})
    return value


class PortalPagination(LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_limit(self, request: Request) -> int | None:
        limit = _bounded_int(request, self.limit_query_param, 1, self.max_limit)
        return self.default_limit if limit is None else limit

    def get_offset(self, request: Request) -> int:
        offset = _bounded_int(request, self.offset_query_param, 0, MAX_OFFSET)
        return offset or 0

    def get_schema_operation_parameters(self, view: Any) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters
