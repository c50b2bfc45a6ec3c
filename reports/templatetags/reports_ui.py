"""The idle report's sparkline: an SVG polyline's points built on the server (no script,
no inline style: the stroke comes from static/css/reports.css)."""

from __future__ import annotations

from django import template

register = template.Library()

WIDTH, HEIGHT = 96, 24


@register.filter
def spark_points(values: list) -> str:
    """Utilization values (0-100, None for no reading) as ``x,y`` pairs; gaps drop to 0."""
    if not isinstance(values, list) or not values:
        return ""
    step = WIDTH / max(len(values) - 1, 1)
    points = []
    for i, value in enumerate(values):
        try:
            util = min(max(float(value or 0), 0.0), 100.0)
        except (TypeError, ValueError):
            util = 0.0
        points.append(f"{i * step:.1f},{HEIGHT - util / 100 * (HEIGHT - 2) - 1:.1f}")
    return " ".join(points)


@register.filter
def hours(minutes: int) -> str:
    return f"{(minutes or 0) / 60:.1f}"
