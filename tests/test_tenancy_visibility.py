"""What tenancy opens in the apps below it: a member sees the process owners on the cards
of their tenants' allocations while those were held, the leases and requests of their
tenants, and nothing of another tenant's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from pools.models import Lease
from quotas import permissions
from tests.factories import GPUFactory, OwnerMinuteFactory, held_allocation
from tests.tenants import teams_fixture  # noqa: F401 (the teams fixture)

pytestmark = pytest.mark.django_db


def _owners(user, gpu) -> list[str]:
    client = APIClient()
    client.force_authenticate(user)
    data = client.get(f"/api/v1/gpus/{gpu.pk}/history/", {"range": "1h"}).json()
    return sorted(row["owner"] for row in data["owners"])


def test_a_member_sees_who_ran_on_their_tenants_card_only_while_it_was_held(teams):
    gpu = GPUFactory()
    now = timezone.now().replace(second=0, microsecond=0)
    held_allocation(teams.acme, teams.pool, teams.user("bob"), now - timedelta(minutes=30),
                    now - timedelta(minutes=10), gpu=gpu)  # fmt: skip
    OwnerMinuteFactory(gpu=gpu, owner="during", bucket=now - timedelta(minutes=20))
    OwnerMinuteFactory(gpu=gpu, owner="before", bucket=now - timedelta(minutes=40))
    OwnerMinuteFactory(gpu=gpu, owner="after", bucket=now - timedelta(minutes=5))
    assert _owners(teams.user("bob"), gpu) == ["during"]
    assert _owners(teams.user("erin"), gpu) == ["during"]
    # Another tenant's member and a user of no tenant see the usage without names.
    assert _owners(teams.user("tom"), gpu) == []
    assert _owners(teams.user("dave"), gpu) == []
    assert _owners(teams.user("alice"), gpu) == ["after", "before", "during"]


def test_a_live_allocation_shows_its_owners_until_now(teams):
    gpu = GPUFactory()
    now = timezone.now().replace(second=0, microsecond=0)
    held_allocation(teams.bravo, teams.pool, teams.user("bella"), now - timedelta(minutes=15),
                    gpu=gpu)  # fmt: skip
    OwnerMinuteFactory(gpu=gpu, owner="bella", bucket=now - timedelta(minutes=3))
    assert _owners(teams.user("tom"), gpu) == ["bella"]
    assert _owners(teams.user("bob"), gpu) == []


def test_leases_visible_to_a_member_are_their_tenants_and_their_own(teams):
    bob, tom = teams.user("bob"), teams.user("tom")
    acme = set(Lease.objects.filter(gpu_request__tenant=teams.acme).values_list("pk", flat=True))
    bravo = set(Lease.objects.filter(gpu_request__tenant=teams.bravo).values_list("pk", flat=True))
    seen = set(
        Lease.objects.filter(permissions.leases_visible_to(bob)).values_list("pk", flat=True)
    )
    assert seen == acme
    seen = set(
        Lease.objects.filter(permissions.leases_visible_to(tom)).values_list("pk", flat=True)
    )
    assert seen == bravo
    assert not Lease.objects.filter(permissions.leases_visible_to(teams.user("dave"))).exists()


def test_requests_are_visible_to_their_tenant_and_decided_by_its_approvers(teams):
    bob, andy, tom, alice = (teams.user(n) for n in ("bob", "andy", "tom", "alice"))
    acme = set(teams.acme.requests.values_list("pk", flat=True))
    assert set(permissions.visible_requests(bob).values_list("pk", flat=True)) == acme
    assert set(permissions.visible_requests(tom).values_list("pk", flat=True)) == set(
        teams.bravo.requests.values_list("pk", flat=True)
    )
    assert permissions.visible_requests(alice).count() == 2
    assert set(permissions.approvable_requests(andy).values_list("pk", flat=True)) == acme
    assert not permissions.approvable_requests(bob).exists()  # a member, and his own
    assert permissions.can_approve(andy, teams.acme) and not permissions.can_approve(
        bob, teams.acme
    )
    assert not permissions.can_approve(andy, teams.bravo)
    assert permissions.can_approve(teams.user("oscar"), teams.bravo)
