"""Two teams and the cast's places in them, for the tenancy tests (pages and API alike).

The people are tests/cast.py's (one fixture each in tests/conftest.py):

- alice: superuser, a platform admin
- oscar: a platform admin by permission (``quotas.change_tenant``), not a superuser
- erin: the admin of acme; andy: its approver; bob: a member of acme, holding a GPU
- tom: the admin of bravo; bella: a member of bravo, holding a GPU in the shared pool
- carol (the operator) and dave (staff without permissions): in no tenant

Anything of bravo's (its name, members, quotas, usage) must never reach acme's people.
A test module imports ``teams_fixture`` and asks for ``teams``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from pools.models import Pool
from quotas.choices import Role
from quotas.models import Membership, Quota, Tenant
from tests.factories import (
    MembershipFactory,
    PoolFactory,
    QuotaFactory,
    TenantFactory,
    held_allocation,
)

# Every signed-in actor, and what each may do with acme.
ACTORS = ("alice", "oscar", "erin", "andy", "bob", "tom", "dave")
PLATFORM_ADMINS = ("alice", "oscar")
SEE_ACME = (*PLATFORM_ADMINS, "erin", "andy", "bob")
MANAGE_ACME_MEMBERS = (*PLATFORM_ADMINS, "erin")
# The secret of bravo: appears in nothing acme's people read.
BRAVO_SECRET = "bravo-secret-team"


@dataclass
class Teams:
    acme: Tenant
    bravo: Tenant
    pool: Pool
    acme_quota: Quota
    bravo_quota: Quota
    users: dict  # name -> user
    memberships: dict  # name -> Membership (erin, andy, bob, tom, bella)

    def user(self, name: str | None):
        """The actor called ``name``; None (an anonymous caller) for None."""
        return None if name is None else self.users[name]


def build_teams(users: dict) -> Teams:
    """The teams around ``users``, the whole cast by name (conftest's ``everyone``)."""
    users = dict(users)
    pool = PoolFactory(name="shared-pool", slug="shared-pool")
    acme = TenantFactory(name="Acme", slug="acme")
    bravo = TenantFactory(name=BRAVO_SECRET, slug="bravo", description=BRAVO_SECRET)
    memberships = {
        "erin": MembershipFactory(user=users["erin"], tenant=acme, role=Role.ADMIN),
        "andy": MembershipFactory(user=users["andy"], tenant=acme, role=Role.APPROVER),
        "bob": MembershipFactory(user=users["bob"], tenant=acme, role=Role.MEMBER),
        "tom": MembershipFactory(user=users["tom"], tenant=bravo, role=Role.ADMIN),
        "bella": MembershipFactory(user=users["bella"], tenant=bravo, role=Role.MEMBER),
    }
    acme_quota = QuotaFactory(tenant=acme, pool=pool)
    bravo_quota = QuotaFactory(tenant=bravo, pool=pool)
    # Each team holds a GPU, placed two hours ago.
    two_hours_ago = timezone.now() - timedelta(hours=2)
    held_allocation(acme, pool, users["bob"], two_hours_ago, compute_pct=50)
    held_allocation(bravo, pool, users["bella"], two_hours_ago, whole_card=True)
    return Teams(acme, bravo, pool, acme_quota, bravo_quota, users, memberships)


def memberships_of(tenant: Tenant) -> list[tuple[int, str]]:
    return list(Membership.objects.filter(tenant=tenant).values_list("user_id", "role"))


@pytest.fixture(name="teams")
def teams_fixture(everyone) -> Teams:
    """Both teams, with the cast (conftest's fixtures) in their places."""
    return build_teams(everyone)
