"""Who sees which rows of the idle and accounting reports, and who may exempt leases and
decide appeals: one set of rules for the pages and the API.

- A member sees the rows of their tenants' leases and their own (``pools.permissions
  .visible_leases``, widened by tenancy); platform admins and whoever sees every lease
  see all, and the physical cards (cards are the fleet's, not a tenant's).
- Exemptions and appeals: platform admins, pool managers, and the approvers and admins
  of the lease's tenant; nobody decides the appeal on their own lease.
- Reclaim policies and unit prices: platform admins.
"""

from __future__ import annotations

from django.db.models import QuerySet

from pools.models import Lease
from pools.permissions import can_manage_pools, can_view_all_leases, visible_leases
from quotas.models import GpuRequest
from quotas.permissions import can_approve, is_platform_admin, tenant_ids_of


def sees_everything(user) -> bool:
    return bool(user.is_authenticated) and (
        is_platform_admin(user) or can_view_all_leases(user) or can_manage_pools(user)
    )


def visible_lease_ids(user) -> QuerySet | None:
    """A subquery of the lease ids ``user`` may see in the reports; None for all."""
    if sees_everything(user):
        return None
    return visible_leases(user).values("pk")


def visible_tenant_ids(user) -> QuerySet | None:
    """The tenants whose accounting ``user`` reads; None for all."""
    if sees_everything(user):
        return None
    return tenant_ids_of(user)


def tenant_of(lease: Lease) -> int | None:
    return GpuRequest.objects.filter(lease_id=lease.pk).values_list("tenant_id", flat=True).first()


def can_exempt(user, lease: Lease) -> bool:
    if not getattr(user, "is_authenticated", False):
        return False
    if is_platform_admin(user) or can_manage_pools(user):
        return True
    tenant_id = tenant_of(lease)
    return tenant_id is not None and can_approve(user, tenant_id)


def can_decide_appeal(user, warning) -> bool:
    return warning.lease.holder_id != user.pk and can_exempt(user, warning.lease)


def can_set_policies(user) -> bool:
    """Set the pools' reclaim policies and the unit prices: platform admins."""
    return is_platform_admin(user)
