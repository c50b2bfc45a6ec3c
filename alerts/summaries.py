"""Event summaries written when they are shown, in the reader's language, with units.

An event stores a key naming one of the shapes below and its parameters (JSON: text and
numbers); ``render`` writes them in the active language: a page's reader's, a message's
channel's (``alerts.messages``). The sources also store the text in the site's language
(``Event.summary``), which is what an unknown key, a parameter missing or malformed, and
events from before keys (or Alertmanager's own text, which has no key) show.

Parameters come from agents and other systems: they are substituted as values, never read
as a format, and the result is plain text, which templates escape like any other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings
from django.utils import formats, timezone, translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from alerts.choices import Condition

METRIC = "metric.value"
CONDITION = "metric.condition"
REQUEST_PENDING = "request.pending"
REQUEST_EXPIRING = "request.expiring"
QUOTA_USED = "quota.used"
RECLAIM_WARNED = "reclaim.warned"

MAX_TEXT = 255  # one parameter as shown
CELSIUS, PERCENT, MIB = "celsius", "percent", "mib"

# What a cycle rule's number measures and its unit (none: a code or a count).
MEASURES = {
    Condition.TEMPERATURE: (gettext_lazy("Temperature"), CELSIUS),
    Condition.MEMORY_USED: (gettext_lazy("Memory used"), PERCENT),
    Condition.UTILIZATION: (gettext_lazy("Utilization"), PERCENT),
    Condition.POWER: (gettext_lazy("Power"), PERCENT),
    Condition.ALLOCATION_UTILIZATION: (gettext_lazy("Utilization"), PERCENT),
    # A process rule's value is the memory the process (or its allocation) uses.
    Condition.PROCESS_UNALLOCATED: (gettext_lazy("Memory used"), MIB),
    Condition.PROCESS_OVER_SLICE: (gettext_lazy("Memory used"), MIB),
    Condition.PROCESS_UNLIMITED: (gettext_lazy("Memory used"), MIB),
    Condition.XID: (gettext_lazy("XID error"), ""),
    Condition.ECC_UNCORRECTABLE: (gettext_lazy("Uncorrectable ECC errors"), ""),
}
# A quota's dimensions, as the quota pages name them.
DIMENSIONS = {
    "vgpus": gettext_lazy("vGPUs"),
    "compute_pct": gettext_lazy("compute (%)"),
    "memory_mib": gettext_lazy("memory (MiB)"),
    "gpu_hours": gettext_lazy("GPU-hours"),
}


def _text(params: Mapping[str, Any], name: str) -> str:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(name)
    return str(value)[:MAX_TEXT]


def _float(params: Mapping[str, Any], name: str) -> float:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(name)
    if not math.isfinite(value):
        raise ValueError(name)
    return float(value)


def number(value: float) -> str:
    """As the readings show it: whole from 10 up, one decimal below."""
    return formats.number_format(value, 0 if abs(value) >= 10 else 1)


def threshold_number(value: float) -> str:
    return formats.number_format(value, 0 if value.is_integer() else None)


def quantity(shown: str, unit: str) -> str:
    if unit == CELSIUS:
        return _("%(number)s °C") % {"number": shown}
    if unit == PERCENT:
        return _("%(number)s %%") % {"number": shown}
    if unit == MIB:
        return _("%(number)s MiB") % {"number": shown}
    return shown


def _condition_label(params: Mapping[str, Any]) -> tuple[str, str]:
    """(what is measured, its unit) of the event's condition."""
    condition = _text(params, "condition")
    if condition in MEASURES:
        measure, unit = MEASURES[condition]
        return str(measure), unit
    if condition in Condition.values:
        return str(Condition(condition).label), ""
    raise ValueError(condition)


def _metric(params: Mapping[str, Any]) -> str:
    measure, unit = _condition_label(params)
    values = {"scope": _text(params, "scope"), "measure": measure,
              "value": quantity(number(_float(params, "value")), unit)}  # fmt: skip
    if params.get("threshold") is None:
        return _("%(scope)s: %(measure)s %(value)s") % values
    values["threshold"] = quantity(threshold_number(_float(params, "threshold")), unit)
    if params.get("comparison") == "lt":
        return _("%(scope)s: %(measure)s %(value)s (< %(threshold)s)") % values
    return _("%(scope)s: %(measure)s %(value)s (> %(threshold)s)") % values


def _condition(params: Mapping[str, Any]) -> str:
    condition = _text(params, "condition")
    if condition not in Condition.values:
        raise ValueError(condition)
    return _("%(scope)s: %(condition)s") % {
        "scope": _text(params, "scope"), "condition": Condition(condition).label}  # fmt: skip


def _request_pending(params: Mapping[str, Any]) -> str:
    return _("Request #%(request)s by %(requester)s has waited %(hours)s h for a decision") % {
        "request": _text(params, "request"), "requester": _text(params, "requester"),
        "hours": formats.number_format(_float(params, "hours"), 1)}  # fmt: skip


def _request_expiring(params: Mapping[str, Any]) -> str:
    return _("Request #%(request)s by %(requester)s expires in %(minutes)s min") % {
        "request": _text(params, "request"), "requester": _text(params, "requester"),
        "minutes": formats.number_format(_float(params, "minutes"), 0)}  # fmt: skip


def _quota_used(params: Mapping[str, Any]) -> str:
    dimension = _text(params, "dimension")
    if dimension not in DIMENSIONS:
        raise ValueError(dimension)
    return _("%(tenant)s in %(pool)s: %(percent)s of %(dimension)s used (%(used)s of "
             "%(limit)s)") % {
        "tenant": _text(params, "tenant"), "pool": _text(params, "pool"),
        "percent": quantity(formats.number_format(_float(params, "percent"), 0), PERCENT),
        "dimension": DIMENSIONS[dimension],
        "used": threshold_number(_float(params, "used")),
        "limit": threshold_number(_float(params, "limit")),
    }  # fmt: skip


def _reclaim_warned(params: Mapping[str, Any]) -> str:
    moment = parse_datetime(_text(params, "release_after"))
    if moment is None or timezone.is_naive(moment):
        raise ValueError("release_after")
    # The same words as the warning's notice (alerts.messages), so they read alike.
    return _("Lease #%(lease)s of %(owner)s in pool %(pool)s is idle. It will be released "
             "after %(when)s unless it is used again, exempted, or an appeal is granted.") % {
        "lease": _text(params, "lease"), "owner": _text(params, "owner"),
        "pool": _text(params, "pool"),
        "when": formats.date_format(timezone.localtime(moment), "DATETIME_FORMAT"),
    }  # fmt: skip


WRITERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    METRIC: _metric,
    CONDITION: _condition,
    REQUEST_PENDING: _request_pending,
    REQUEST_EXPIRING: _request_expiring,
    QUOTA_USED: _quota_used,
    RECLAIM_WARNED: _reclaim_warned,
}


def render(key: str, params: Any, fallback: str = "") -> str:
    """The summary in the active language; ``fallback`` when it cannot be written."""
    writer = WRITERS.get(key)
    if writer is None or not isinstance(params, Mapping):
        return fallback
    try:
        return writer(params)[:2000]
    except (KeyError, TypeError, ValueError):  # a malformed event, or a bad translation
        return fallback


def stored_text(key: str, params: Any, text: str = "") -> str:
    """What an event keeps in its summary column: ``text`` if given, else the summary in
    the site's language and time zone (what is shown when the key cannot be)."""
    if text or not key:
        return text[:2000]
    with translation.override(settings.LANGUAGE_CODE), timezone.override(settings.TIME_ZONE):
        return render(key, params)
