"""Quotas' public interface for the apps above it (alerts, reports).

Models and choices are public too (``quotas.models``, ``quotas.choices``), and the
capability rules (``quotas.permissions``). Everything else in quotas is private.
"""

from __future__ import annotations

from quotas.notices import text_of as notice_text
from quotas.queries import RequestFact, expiring_requests, pending_requests
from quotas.signals import request_event
from quotas.usage import QuotaUsage, Usage, gpu_hours_left, gpu_hours_used, quota_usage

__all__ = [
    "QuotaUsage",
    "RequestFact",
    "Usage",
    "expiring_requests",
    "gpu_hours_left",
    "gpu_hours_used",
    "notice_text",
    "pending_requests",
    "quota_usage",
    "request_event",
]
