from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def cards(pct: int | float | None) -> str:
    """Compute in whole-card percent as cards: 355 -> "3.55", 6400 -> "64". A pool's totals
    read as cards, the way people count GPUs; a single card's share stays in percent."""
    if pct is None:
        return "\u2013"
    text = f"{pct / 100:.2f}".rstrip("0").rstrip(".")
    return text or "0"


@register.filter
def gib(mib: int | float | None) -> str:
    """MiB as GiB with one decimal; a dash when unknown."""
    if mib is None:
        return "\u2013"  # an en dash, as the live pages show
    return f"{mib / 1024:.1f}"
