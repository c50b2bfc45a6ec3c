from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def gib(mib: int | float | None) -> str:
    """MiB as GiB with one decimal; a dash when unknown."""
    if mib is None:
        return "\u2013"  # an en dash, as the live pages show
    return f"{mib / 1024:.1f}"
