"""Who sees and manages which channels, subscriptions, events and rules: one rule for
the pages and the API.

Everyone manages their own channels and subscriptions; a tenant's are managed by its
admins; a channel's URL may point at any host only for those ``may_post_to`` lets; the
platform admin (``quotas.permissions.is_platform_admin``) sees and manages all, and
alone edits rules (everyone reads them, to subscribe). Nobody else learns that a channel
or subscription exists: another's answers 404, not 403. Events are seen as
``alerts.recipients`` sends them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import Q, QuerySet

from agents.models import Node
from agents.permissions import CHANGE_NODE
from alerts.choices import ScopeKind
from alerts.live import ALL_GROUP, PLATFORM_GROUP, tenant_group
from alerts.models import Channel, Event, Rule, Subscription
from alerts.transports import TRANSPORTS
from alerts.transports.http import allowed_http_host
from pools.models import Pool
from quotas.interface import administered_tenant_ids
from quotas.models import Tenant
from quotas.permissions import can_approve, is_platform_admin, tenant_ids_of, visible_tenants

User = AbstractBaseUser | AnonymousUser


def managed_tenants(user: User) -> QuerySet[Tenant]:
    if not user.is_authenticated:
        return Tenant.objects.none()
    if is_platform_admin(user):
        return Tenant.objects.all()
    return Tenant.objects.filter(pk__in=administered_tenant_ids(user))


def visible_channels(user: User) -> QuerySet[Channel]:
    if not user.is_authenticated:
        return Channel.objects.none()
    if is_platform_admin(user):
        return Channel.objects.all()
    return Channel.objects.filter(Q(owner=user) | Q(tenant__in=managed_tenants(user).values("pk")))


def can_manage(user: User, channel: Channel) -> bool:
    return visible_channels(user).filter(pk=channel.pk).exists()


def sees_platform_events(user: User) -> bool:
    """Platform events (cards, nodes, Alertmanager: no tenant) are for platform admins
    and node operators, as ``alerts.recipients`` sends them."""
    return user.is_authenticated and (is_platform_admin(user) or user.has_perm(CHANGE_NODE))


def visible_events(user: User) -> QuerySet[Event]:
    if not user.is_authenticated:
        return Event.objects.none()
    if is_platform_admin(user):
        return Event.objects.all()
    mine = Q(tenant_id__in=tenant_ids_of(user))
    if sees_platform_events(user):
        mine |= Q(tenant__isnull=True)
    return Event.objects.filter(mine)


def can_acknowledge(user: User, event: Event) -> bool:
    """Platform events: who sees them; a tenant's: its admins and approvers."""
    if not user.is_authenticated:
        return False
    if is_platform_admin(user):
        return True
    if event.tenant_id is None:
        return sees_platform_events(user)
    return can_approve(user, event.tenant_id)


def visible_subscriptions(user: User) -> QuerySet[Subscription]:
    if not user.is_authenticated:
        return Subscription.objects.none()
    if is_platform_admin(user):
        return Subscription.objects.all()
    return Subscription.objects.filter(
        Q(owner=user) | Q(tenant__in=managed_tenants(user).values("pk"))
    )


POST_TO_ANY_HOST = "alerts.post_to_any_host"


def may_post_to(user: User | None, kind: str, url: str) -> bool:
    """Whether ``user`` may point a channel of ``kind`` at ``url``'s host. Anyone: the
    vendor's public robot hosts and the operator's ALERT_OPEN_HOSTS (and the http hosts
    they allow); any other host, where an alert would carry the portal's requests into a
    network, only platform admins and holders of ``POST_TO_ANY_HOST``. ``None`` is the
    portal itself (the demo's seed)."""
    if user is None:
        return True
    host = (urlsplit(url).hostname or "").lower()
    open_hosts = {h.lower() for h in settings.ALERT_OPEN_HOSTS}
    if host in TRANSPORTS[kind].public_hosts or host in open_hosts or allowed_http_host(host):
        return True
    return is_platform_admin(user) or user.has_perm(POST_TO_ANY_HOST)


def manages_rules(user: User) -> bool:
    return is_platform_admin(user)


def visible_rules(user: User) -> QuerySet[Rule]:
    """The rules that apply to the reader: every rule not scoped to a tenant, and those of
    the reader's tenants (another tenant's rule would tell its name); all for the
    platform admin."""
    if not user.is_authenticated:
        return Rule.objects.none()
    if is_platform_admin(user):
        return Rule.objects.all()
    return Rule.objects.filter(Q(tenant__isnull=True) | Q(tenant_id__in=tenant_ids_of(user)))


def scope_targets(user: User | None) -> dict[str, QuerySet]:
    """What ``user`` may scope a rule or a subscription to, by scope kind: every pool and
    node (every member reads the fleet) and the tenants they see (another tenant's name is
    not theirs to learn). ``None`` is the portal itself."""
    if user is None:
        tenants = Tenant.objects.all()
    elif not user.is_authenticated:
        tenants = Tenant.objects.none()
    else:
        tenants = visible_tenants(user)
    return {
        ScopeKind.POOL: Pool.objects.order_by("name"),
        ScopeKind.NODE: Node.objects.order_by("name"),
        ScopeKind.TENANT: tenants.order_by("name"),
    }


def event_groups(user: User) -> list[str]:
    """The live groups (alerts.live) a dashboard joins: exactly the events
    ``visible_events`` lets the user see."""
    if not user.is_authenticated:
        return []
    if is_platform_admin(user):
        return [ALL_GROUP]
    mine = tenant_ids_of(user).values_list("tenant_id", flat=True)
    groups = [tenant_group(pk) for pk in sorted(mine)]
    if sees_platform_events(user):
        groups.append(PLATFORM_GROUP)
    return groups
