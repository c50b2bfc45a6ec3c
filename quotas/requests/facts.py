"""Small read-only questions the apps above ask about requests (alerts' business rules),
answered with plain values in one query each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from quotas.choices import RequestState
from quotas.models import GpuRequest


@dataclass(frozen=True, slots=True)
class RequestFact:
    request_id: int
    tenant_id: int
    tenant_slug: str
    pool_id: int
    pool_slug: str
    requester_id: int
    requester: str
    at: datetime  # when it was asked (pending) or when it expires (allocated)


def _facts(queryset, at_field: str) -> list[RequestFact]:
    rows = queryset.values_list(
        "pk", "tenant_id", "tenant__slug", "pool_id", "pool__slug", "requester_id",
        "requester__username", at_field,
    )  # fmt: skip
    return [RequestFact(*row) for row in rows]


def pending_requests(asked_before: datetime) -> list[RequestFact]:
    """Requests still waiting for a decision that were asked before ``asked_before``."""
    qs = GpuRequest.objects.filter(state=RequestState.PENDING, created__lt=asked_before)
    return _facts(qs.order_by("created"), "created")


def expiring_requests(before: datetime) -> list[RequestFact]:
    """Allocated requests whose GPUs expire before ``before``."""
    qs = GpuRequest.objects.filter(
        state=RequestState.ALLOCATED, expires_at__isnull=False, expires_at__lt=before
    )
    return _facts(qs.order_by("expires_at"), "expires_at")
