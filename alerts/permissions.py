"""Who sees and manages which channels: one rule for the pages and the API.

Everyone manages their own channels; a tenant's channels are managed by its admins; the
platform admin (a superuser) sees and manages all. Nobody else learns that a channel
exists: another's channel answers 404, not 403.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

from alerts.models import Channel
from quotas.choices import Role
from quotas.models import Tenant

User = AbstractBaseUser | AnonymousUser


def managed_tenants(user: User) -> QuerySet[Tenant]:
    if not user.is_authenticated:
        return Tenant.objects.none()
    if user.is_superuser:
        return Tenant.objects.all()
    return Tenant.objects.filter(memberships__user=user, memberships__role=Role.ADMIN)


def visible_channels(user: User) -> QuerySet[Channel]:
    if not user.is_authenticated:
        return Channel.objects.none()
    if user.is_superuser:
        return Channel.objects.all()
    return Channel.objects.filter(Q(owner=user) | Q(tenant__in=managed_tenants(user).values("pk")))


def can_manage(user: User, channel: Channel) -> bool:
    return visible_channels(user).filter(pk=channel.pk).exists()
