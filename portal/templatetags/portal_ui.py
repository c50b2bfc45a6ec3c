"""Template helpers for the UI kit (Tabler on Bootstrap 5): icons and form widgets."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from django import forms, template
from django.contrib.staticfiles import finders
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


ICON_NAME = re.compile(r"[a-z0-9-]+")
SVG_BODY = re.compile(r"<svg[^>]*>(.*)</svg>", re.DOTALL)


@functools.cache
def _icon_paths(name: str) -> str:
    """The drawing inside one of Tabler's outline icon files ('' when it is not installed)."""
    path = finders.find(f"vendor/tabler-icons/{name}.svg") if ICON_NAME.fullmatch(name) else None
    if not path:
        return ""
    found = SVG_BODY.search(Path(path).read_text(encoding="utf-8"))
    return found.group(1).strip() if found else ""


@register.simple_tag
def icon(name: str, extra: str = "") -> SafeString:
    """One of Tabler's outline icons, drawn inline in the text colour.

    Inline SVG rather than a CSS mask with a per-icon style attribute: the content security
    policy allows no inline style, and Tabler's ``.icon`` class is made for inline SVG.
    """
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" class="icon pi {}" viewBox="0 0 24 24" '
        'fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" '
        'stroke-linejoin="round" aria-hidden="true" focusable="false">{}</svg>',
        extra,
        mark_safe(_icon_paths(name)),  # noqa: S308 (the kit's own SVG files, read from disk)
    )


@register.filter
def kit_widget(field: forms.BoundField) -> SafeString:
    """The field's widget with the kit's class, marked invalid when the field has errors."""
    widget = field.field.widget
    if isinstance(widget, forms.RadioSelect | forms.CheckboxSelectMultiple):
        return _choice_list(field)
    if isinstance(widget, forms.CheckboxInput):
        css = "form-check-input"
    elif isinstance(widget, forms.Select):
        css = "form-select"
    else:
        css = "form-control"
    if field.errors:
        css += " is-invalid"
    return field.as_widget(attrs={"class": css})


def _choice_list(field: forms.BoundField) -> SafeString:
    """Radio buttons and checkbox lists as the kit's checks: a visible control beside each
    label. With the text boxes' ``form-control`` they drew as empty boxes (appearance:
    none), and nobody could see which option was chosen."""
    css = "form-check-input" + (" is-invalid" if field.errors else "")
    items = []
    for option in field.subwidgets:
        option.data["attrs"] = {**option.data["attrs"], "class": css}
        items.append(format_html(
            '<label class="form-check form-check-inline">{}'
            '<span class="form-check-label">{}</span></label>',
            option.tag(), option.choice_label,
        ))  # fmt: skip
    role = "radiogroup" if isinstance(field.field.widget, forms.RadioSelect) else "group"
    return format_html(
        '<div class="form-choices" role="{}" aria-labelledby="{}-label">{}</div>',
        role, field.auto_id, format_html_join("", "{}", ((item,) for item in items)),
    )  # fmt: skip


@register.filter
def is_choice_list(field: forms.BoundField) -> bool:
    return isinstance(field.field.widget, forms.RadioSelect | forms.CheckboxSelectMultiple)


@register.filter
def is_checkbox(field: forms.BoundField) -> bool:
    return isinstance(field.field.widget, forms.CheckboxInput)
