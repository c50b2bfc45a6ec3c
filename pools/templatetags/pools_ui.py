from __future__ import annotations

from django import template

from agents.choices import vendor_label
from portal.templatetags.portal_ui import gib, sep

register = template.Library()


@register.filter
def cards(pct: int | float | None) -> str:
    """Compute in whole-card percent as cards: 355 -> "3.55", 6400 -> "64". A pool's totals
    read as cards, the way people count GPUs; a single card's share stays in percent."""
    if pct is None:
        return "\u2013"
    text = f"{pct / 100:.2f}".rstrip("0").rstrip(".")
    return text or "0"


# The one MiB-as-GiB filter lives in portal_ui (the GPU page below pools uses it too).
register.filter("gib", gib)


@register.filter
def vendors(values) -> str:
    """A pool's card vendors (an ArrayAgg, None for a pool without cards) as pages name them."""
    return sep("comma").join(sorted(vendor_label(v) for v in values or () if v))
