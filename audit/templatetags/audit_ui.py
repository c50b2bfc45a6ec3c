from django import template

from audit.interface import action_label as _action_label

register = template.Library()


@register.filter
def action_label(action: str) -> str:
    """An audit action as the reader's language says it (its code when no app named it)."""
    return _action_label(action)
