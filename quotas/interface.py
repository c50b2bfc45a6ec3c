"""Quotas' public interface for the apps above it (alerts, reports).

Models and choices are public too (``quotas.models``, ``quotas.choices``).
"""

from __future__ import annotations

from quotas.signals import request_event

__all__ = ["request_event"]
