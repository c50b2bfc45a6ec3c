"""The sidebar's requests items: the unread notices badge, and whether to show Approvals."""

from __future__ import annotations

from django import template

from quotas.notices import unread_count
from quotas.request_rules import may_approve_somewhere

register = template.Library()


@register.simple_tag
def unread_notices(user) -> int:
    return unread_count(user)


@register.simple_tag
def approves_somewhere(user) -> bool:
    return may_approve_somewhere(user)
