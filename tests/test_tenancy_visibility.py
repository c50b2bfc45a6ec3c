"""What tenancy opens in the apps below it: a member sees the process owners on the cards
of their tenants' allocations while those were held, the leases and requests of their
tenants (and a former member their own), and nothing of another tenant's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from pools.models import Lease
from quotas import permissions
from quotas.models import GpuRequest
from quotas.requests import permissions as request_permissions
from quotas.tenancy import services as tenancy
from tests import clients
from tests.factories import GPUFactory, OwnerMinuteFactory, held_allocation
from tests.tenants import teams_fixture  # noqa: F401 (the teams fixture)

pytestmark = pytest.mark.django_db


def _owners(user, gpu) -> list[str]:
    client = clients.api(user)
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
        Lease.objects.filter(request_permissions.leases_visible_to(bob)).values_list(
            "pk", flat=True
        )
    )
    assert seen == acme
    seen = set(
        Lease.objects.filter(request_permissions.leases_visible_to(tom)).values_list(
            "pk", flat=True
        )
    )
    assert seen == bravo
    assert not Lease.objects.filter(
        request_permissions.leases_visible_to(teams.user("dave"))
    ).exists()


def _ids(rows) -> set[int]:
    return set(rows.values_list("pk", flat=True))


def test_requests_are_visible_to_their_tenant_and_decided_by_its_approvers(teams):
    bob, andy, tom, alice = (teams.user(n) for n in ("bob", "andy", "tom", "alice"))
    acme = _ids(teams.acme.requests.all())
    assert _ids(request_permissions.visible_requests(bob)) == acme
    assert _ids(request_permissions.visible_requests(tom)) == _ids(teams.bravo.requests.all())
    assert request_permissions.visible_requests(alice).count() == 2
    assert not request_permissions.visible_requests(teams.user("dave")).exists()
    pending = GpuRequest.objects.create(tenant=teams.acme, pool=teams.pool, requester=bob,
                                        reason="training")  # fmt: skip
    assert _ids(request_permissions.decidable_requests(andy)) == {pending.pk}
    assert _ids(request_permissions.decidable_requests(alice)) == {pending.pk}
    assert not request_permissions.decidable_requests(bob).exists()  # a member, and his own
    assert not request_permissions.decidable_requests(tom).exists()  # another tenant's admin
    assert request_permissions.can_decide(andy, pending) and not request_permissions.can_decide(
        bob, pending
    )
    assert permissions.can_approve(andy, teams.acme) and not permissions.can_approve(
        bob, teams.acme
    )
    assert not permissions.can_approve(andy, teams.bravo)
    assert permissions.can_approve(teams.user("oscar"), teams.bravo)


def test_a_former_member_still_sees_the_requests_they_made_and_no_other(teams):
    bob, erin = teams.user("bob"), teams.user("erin")
    [own] = GpuRequest.objects.filter(requester=bob)
    held_allocation(teams.acme, teams.pool, erin, timezone.now() - timedelta(hours=1))
    [theirs] = GpuRequest.objects.filter(requester=erin)
    tenancy.remove_member(teams.memberships["bob"].pk, erin)
    # Leaving releases nothing: bob still holds the GPU, its lease and its request.
    assert _ids(request_permissions.visible_requests(bob)) == {own.pk}
    assert Lease.objects.filter(request_permissions.leases_visible_to(bob)).get() == own.lease
    assert not request_permissions.can_manage(bob, own)  # acting on it needs the membership
    client = clients.api(bob)
    assert [r["id"] for r in client.get("/api/v1/gpu-requests/").json()["results"]] == [own.pk]
    assert client.get(f"/api/v1/gpu-requests/{theirs.pk}/").status_code == 404
    page = clients.page(bob)
    assert page.get(reverse("requests:request_detail", args=[own.pk])).status_code == 200
    assert page.get(reverse("requests:request_detail", args=[theirs.pk])).status_code == 404
    assert f"/requests/{own.pk}/" in page.get(reverse("requests:request_mine")).text
