"""History requests as the pages and the API make them: a named range, validated."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents import rollups

RANGES = {
    "1h": (timedelta(hours=1), _("1 hour")),
    "24h": (timedelta(hours=24), _("24 hours")),
    "7d": (timedelta(days=7), _("7 days")),
}


class BadRange(ValueError):
    pass


def window(name: str, now: datetime | None = None) -> tuple[datetime, datetime]:
    if name not in RANGES:
        raise BadRange(
            _("Unknown range %(name)s; use one of %(names)s.")
            % {"name": name, "names": ", ".join(RANGES)}
        )
    end = now or timezone.now()
    return end - RANGES[name][0], end


def gpu_history(gpu_ids: list[int], range_name: str) -> dict:
    start, end = window(range_name)
    data = rollups.series(gpu_ids, start, end)
    data["owners"] = rollups.owner_usage(gpu_ids, start, end)
    data["range"] = range_name
    return data
