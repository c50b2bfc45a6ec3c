"""History as the pages and the API read it: named ranges, and queries over the rollups.

Queries take a set of GPU ids and a time range, so per-allocation and per-tenant
history can be built on top by mapping them to GPUs and intervals.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Avg,
    Count,
    ExpressionWrapper,
    F,
    FloatField,
    Max,
    Q,
    Sum,
)
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from agents.gpu_agent import schema
from telemetry.models import GpuHour, GpuMinute, OwnerHour, OwnerMinute

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


def gpu_history(gpu_ids: list[int], range_name: str, owners: Q | None = None) -> dict:
    """Series and process owners; ``owners`` says which owner rows the reader may see
    (telemetry.permissions.visible_owners): None lists none, ``Q()`` all."""
    start, end = window(range_name)
    data = series(gpu_ids, start, end)
    data["owners"] = [] if owners is None else owner_usage(gpu_ids, start, end, only=owners)
    data["range"] = range_name
    return data


def _combined(fields: tuple[schema.Field, ...], across_cards: bool) -> dict[str, Any]:
    """How rollup rows combine, from the reading schema: averages averaged and peaks as
    peaks, except that across the cards of one bucket memory and power add up."""
    out: dict[str, Any] = {}
    for field in fields:
        avg, peak = field.history.columns()
        summed = across_cards and field.history.across_cards == "sum"
        out[avg] = Sum(avg) if summed else Avg(avg)
        out[peak] = Sum(peak) if summed else Max(peak)
    return out


_ACROSS_CARDS = _combined(schema.HISTORY_GPU_FIELDS, across_cards=True)
_OWNER_OVER_CARDS = _combined(schema.HISTORY_PROCESS_FIELDS, across_cards=False)

# Ranges up to this long are drawn from minutes; longer ones from hours.
MINUTE_RANGE_LIMIT = timedelta(hours=36)


def _in_range(
    tables: dict[str, type],
    gpu_ids: Iterable[int],
    start: datetime,
    end: datetime,
    resolution: str | None,
) -> tuple[str, Any]:
    """The resolution to read (chosen by the range when not given) and its rows in range."""
    if resolution is None:
        resolution = "1m" if end - start <= MINUTE_RANGE_LIMIT else "1h"
    rows = tables[resolution].objects.filter(
        gpu_id__any=list(gpu_ids), bucket__gte=start, bucket__lt=end
    )
    return resolution, rows


def series(
    gpu_ids: Iterable[int], start: datetime, end: datetime, resolution: str | None = None
) -> dict[str, Any]:
    """History of a set of GPUs: per bucket, utilization averaged over the cards,
    memory and power summed, maxima as maxima.
    """
    tables = {"1m": GpuMinute, "1h": GpuHour}
    resolution, in_range = _in_range(tables, gpu_ids, start, end, resolution)
    rows = (
        in_range.values("bucket").annotate(gpus=Count("gpu_id"), **_ACROSS_CARDS).order_by("bucket")
    )
    return {
        "resolution": resolution,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "points": [
            {**{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()
                if k != "bucket"}, "t": r["bucket"].isoformat()}
            for r in rows
        ],
    }  # fmt: skip


def owner_usage(
    gpu_ids: Iterable[int],
    start: datetime,
    end: datetime,
    resolution: str | None = None,
    only: Q | None = None,
) -> list[dict[str, Any]]:
    """Per process owner over a range: the average and peak of each history field;
    ``only`` keeps the rows it matches (fields ``gpu``, ``owner``, ``bucket``)."""
    tables = {"1m": OwnerMinute, "1h": OwnerHour}
    _, in_range = _in_range(tables, gpu_ids, start, end, resolution)
    rows = (
        in_range.filter(only or Q())
        .values("owner")
        .annotate(**_OWNER_OVER_CARDS, samples=Sum("samples"))
        .order_by("-memory_used_avg_mib")
    )
    return list(rows)


def _weighted(fields: tuple[schema.Field, ...]) -> dict[str, Any]:
    """Over a window: each average weighted by the samples behind it, peaks as peaks."""
    out: dict[str, Any] = {}
    for field in fields:
        avg, peak = field.history.columns()
        present = Q(**{f"{avg}__isnull": False})
        out[avg] = ExpressionWrapper(
            Sum(F(avg) * F("samples"), filter=present) / Sum("samples", filter=present),
            output_field=FloatField(),
        )
        out[peak] = Max(peak)
    return out


def usage_by_card(
    gpu_ids: Iterable[int], start: datetime, end: datetime, resolution: str | None = None
) -> dict[int, dict[str, Any]]:
    """Per card over a window: samples, and each history field's weighted average and peak."""
    _, in_range = _in_range({"1m": GpuMinute, "1h": GpuHour}, gpu_ids, start, end, resolution)
    rows = in_range.values("gpu_id").annotate(
        samples_total=Sum("samples"), **_weighted(schema.HISTORY_GPU_FIELDS)
    )
    return {row.pop("gpu_id"): {**row, "samples": row.pop("samples_total")} for row in rows}


def usage_by_card_owner(
    gpu_ids: Iterable[int], start: datetime, end: datetime, resolution: str | None = None
) -> list[dict[str, Any]]:
    """Per card and process owner over a window, as ``usage_by_card``."""
    tables = {"1m": OwnerMinute, "1h": OwnerHour}
    _, in_range = _in_range(tables, gpu_ids, start, end, resolution)
    rows = (
        in_range.values("gpu_id", "owner")
        .annotate(samples_total=Sum("samples"), **_weighted(schema.HISTORY_PROCESS_FIELDS))
        .order_by("gpu_id", "owner")
    )
    return [{**row, "samples": row.pop("samples_total")} for row in rows]
