"""Quotas' public interface for the apps above it (clusters, alerts, reports, tokens).

Models and choices are public too (``quotas.models``, ``quotas.choices``), and the
capability rules (``quotas.permissions``). Everything else in quotas is private. The apps
above ask who holds which role here (``tenant_admin_ids`` and the like), never by
querying ``Membership`` themselves.
"""

from __future__ import annotations

from quotas.permissions import (
    administered_tenant_ids,
    tenant_admin_ids,
    tenant_admins,
    tenant_members,
)
from quotas.requests.facts import RequestFact, expiring_requests, pending_requests
from quotas.requests.lifecycle import release_lease_request
from quotas.requests.notices import announce_id
from quotas.requests.notices import text_of as notice_text
from quotas.requests.permissions import visible_requests
from quotas.requests.services import create_request, demand_of, end_request
from quotas.requests.signals import request_event
from quotas.tenancy.accounts import is_managed as is_managed_user
from quotas.tenancy.accounts import own_accounts, source_of
from quotas.tenancy.accounts import set_apart as set_apart_users
from quotas.tenancy.pool_quotas import PoolQuota, pool_quotas
from quotas.tenancy.preferences import (
    Preferences,
    language_of_user,
    preferences_of,
    set_preferences,
    time_zones,
)
from quotas.tenancy.services import add_member, apply_directory_roles
from quotas.tenancy.usage import (
    REQUESTER,
    TENANT,
    Held,
    QuotaUsage,
    Usage,
    held_hours,
    quota_usage,
)

__all__ = [
    "REQUESTER",
    "TENANT",
    "Held",
    "PoolQuota",
    "Preferences",
    "QuotaUsage",
    "RequestFact",
    "Usage",
    "add_member",
    "administered_tenant_ids",
    "announce_id",
    "apply_directory_roles",
    "create_request",
    "demand_of",
    "end_request",
    "expiring_requests",
    "held_hours",
    "is_managed_user",
    "language_of_user",
    "notice_text",
    "own_accounts",
    "pending_requests",
    "pool_quotas",
    "preferences_of",
    "quota_usage",
    "release_lease_request",
    "request_event",
    "set_apart_users",
    "set_preferences",
    "source_of",
    "tenant_admin_ids",
    "tenant_admins",
    "tenant_members",
    "time_zones",
    "visible_requests",
]
