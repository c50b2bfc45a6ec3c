"""The sidebar's tenancy items: the unread notices badge, whether to show Approvals,
whether to show the platform admins' pages (Users, unit prices, reclaim policies), and
whether "/" is the user's home rather than the fleet (then the sidebar has no Fleet)."""

from __future__ import annotations

from django import template

from quotas.permissions import approves_somewhere as _approves_somewhere
from quotas.permissions import is_platform_admin
from quotas.requests.home import lands_on_home as _lands_on_home
from quotas.requests.notices import unread_count

register = template.Library()


@register.simple_tag
def unread_notices(user) -> int:
    return unread_count(user)


@register.simple_tag
def approves_somewhere(user) -> bool:
    return _approves_somewhere(user)


@register.simple_tag
def platform_admin(user) -> bool:
    return is_platform_admin(user)


@register.simple_tag
def lands_on_home(user) -> bool:
    return _lands_on_home(user)
