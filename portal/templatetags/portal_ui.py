"""Template helpers for the UI kit (Tabler on Bootstrap 5): icons and form widgets."""

from __future__ import annotations

from django import forms, template
from django.templatetags.static import static
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.simple_tag
def icon(name: str, extra: str = "") -> SafeString:
    """One of Tabler's outline icons, painted in the text colour through a CSS mask."""
    url = static(f"vendor/tabler-icons/{name}.svg")
    return format_html(
        '<span class="icon pi {}" style="--pi: url(\'{}\')" aria-hidden="true"></span>', extra, url
    )


@register.filter
def kit_widget(field: forms.BoundField) -> SafeString:
    """The field's widget with the kit's class, marked invalid when the field has errors."""
    widget = field.field.widget
    if isinstance(widget, forms.CheckboxInput):
        css = "form-check-input"
    elif isinstance(widget, forms.Select):
        css = "form-select"
    else:
        css = "form-control"
    if field.errors:
        css += " is-invalid"
    return field.as_widget(attrs={"class": css})


@register.filter
def is_checkbox(field: forms.BoundField) -> bool:
    return isinstance(field.field.widget, forms.CheckboxInput)
