"""A platform admin is whoever holds ``quotas.change_tenant`` (``quotas.permissions
.is_platform_admin``), granted to them or to one of their groups, not only a superuser:
the same on the pages, the API, the sockets and the notices of every app. Staff without
it is nobody in particular.

The API's answers per operation are in the role matrix (tests/test_api_role_matrix.py,
column ``padmin``); here is what a status code does not show: which rows each one gets.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Q
from django.utils import timezone

from alerts import live
from alerts.models import Delivery, Rule
from alerts.permissions import event_groups
from alerts.recipients import matching
from alerts.sources.reclaim import deliver_digest
from pools.permissions import visible_leases
from quotas.choices import RequestState
from quotas.permissions import CHANGE_TENANT, is_platform_admin, platform_admins
from quotas.requests import notices
from quotas.requests.consumers import RequestConsumer
from quotas.requests.permissions import owners_visible_to
from quotas.requests.services import create_request
from reports.digest import recipients
from tests import clients
from tests.factories import (
    EventFactory,
    GPUFactory,
    MembershipFactory,
    OwnerMinuteFactory,
    SubscriptionFactory,
    UserFactory,
    gpu_team,
    held_allocation,
    permission,
)
from tests.test_alert_reports import digest_of, email_channel

pytestmark = pytest.mark.django_db


@pytest.fixture
def grace(db):
    """A platform admin through a group holding the permission."""
    group = Group.objects.create(name="platform admins")
    group.permissions.add(permission(CHANGE_TENANT))
    user = UserFactory(username="grace", password=None)
    user.groups.add(group)
    return user


@pytest.fixture
def admins(alice, oscar, grace) -> dict:
    return {"alice": alice, "oscar": oscar, "grace": grace}


def test_the_filter_over_users_picks_exactly_whom_is_platform_admin_accepts(admins, dave, carol):
    inactive = UserFactory(username="gone", is_superuser=True, is_active=False)
    users = [*admins.values(), dave, carol, inactive, UserFactory(username="plain")]
    # Fresh objects: has_perm caches what it read on the user.
    fresh = get_user_model().objects.filter(pk__in=[u.pk for u in users])
    said = {user.username for user in fresh if is_platform_admin(user)}
    picked = set(
        get_user_model().objects.filter(platform_admins()).values_list("username", flat=True)
    )
    assert said == picked == {"alice", "oscar", "grace"}
    # Subqueries, not joins: combined with a join it counts nobody twice, however many
    # permissions and memberships they have.
    oscar, team = admins["oscar"], gpu_team("vision")
    oscar.user_permissions.add(permission("quotas.view_tenant"))
    MembershipFactory(user=oscar, tenant=team.tenant)
    either = platform_admins() | Q(memberships__tenant=team.tenant)
    assert get_user_model().objects.filter(either, pk=oscar.pk).count() == 1


def test_a_platform_admin_sees_decides_and_releases_any_tenants_request(
    admins, django_capture_on_commit_callbacks
):
    team = gpu_team("vision")
    pending = [create_request(team.dev, **team.ask()) for _ in admins]
    for (name, user), req in zip(admins.items(), pending, strict=True):
        page = clients.page(user)
        assert page.get(f"/requests/{req.pk}/").status_code == 200, name
        queue = page.get("/approvals/").content.decode()
        assert 'href="/approvals/"' in queue and f'data-request-id="{req.pk}"' in queue, name
        listed = {
            row["id"] for row in clients.api(user).get("/api/v1/gpu-requests/").json()["results"]
        }
        assert {r.pk for r in pending} <= listed, name
        with django_capture_on_commit_callbacks(execute=True):
            answer = page.post(f"/requests/{req.pk}/decide/", {"decision": "approve"})
        assert answer.status_code == 302, name
        req.refresh_from_db()
        assert req.state != RequestState.PENDING and req.decided_by == user, name
    # Placed (the pool has room): any platform admin manages it, e.g. releases it.
    req = pending[0]
    req.refresh_from_db()
    assert req.state == RequestState.ALLOCATED
    assert (
        clients.api(admins["grace"]).post(f"/api/v1/gpu-requests/{req.pk}/release/").status_code
        == 200
    )


def test_staff_without_the_permission_sees_and_decides_nothing_of_a_tenant(dave):
    team = gpu_team("vision")
    req = create_request(team.dev, **team.ask())
    page = clients.page(dave)
    assert page.get(f"/requests/{req.pk}/").status_code == 404
    assert page.get("/approvals/").status_code == 403
    assert 'href="/approvals/"' not in page.get("/requests/").content.decode()
    assert page.post(f"/requests/{req.pk}/decide/", {"decision": "approve"}).status_code == 404
    assert clients.api(dave).get("/api/v1/gpu-requests/").json()["results"] == []
    req.refresh_from_db()
    assert req.state == RequestState.PENDING


def test_the_sockets_join_a_platform_admin_to_every_tenant_and_staff_to_none(oscar, grace, dave):
    for user in (oscar, grace):
        assert RequestConsumer._groups(user) == [notices.user_group(user.pk), notices.ALL_GROUP]
        assert event_groups(user) == [live.ALL_GROUP]
    assert RequestConsumer._groups(dave) == [notices.user_group(dave.pk)]
    assert event_groups(dave) == []


def test_a_platform_admins_own_subscription_gets_every_tenants_events_and_the_platforms(
    oscar, grace, dave
):
    team = gpu_team("vision")
    subs = {user.username: SubscriptionFactory(owner=user) for user in (oscar, grace, dave)}
    tenant_event = EventFactory(tenant=team.tenant, scope="tenant:vision")
    platform_event = EventFactory()
    for event in (tenant_event, platform_event):
        got = {sub.owner.username for sub in matching(event)}
        assert got == {"oscar", "grace"}, event.scope
    assert subs["dave"] not in matching(tenant_event)


def test_the_idle_digest_goes_whole_to_platform_admins_by_permission_or_group(oscar, grace, dave):
    acme, bravo = gpu_team("acme"), gpu_team("bravo")
    who = recipients()
    assert {oscar.pk, grace.pk, acme.admin.pk} <= who and dave.pk not in who
    channels = {user.username: email_channel(user, f"{user.username}@example.com",
                                              rules=["idle-digest"])
                for user in (oscar, grace, acme.admin, dave)}  # fmt: skip
    assert Rule.objects.filter(key="idle-digest", enabled=True).exists()
    deliver_digest(day="2026-12-01", recipient_ids={oscar.pk, grace.pk, acme.admin.pk, dave.pk},
                   digest=digest_of(acme.tenant, bravo.tenant))  # fmt: skip
    got = {
        name: Delivery.objects.get(channel_id=channel_id).notice["digest"]
        for name, channel_id in channels.items()
        if name != "dave"
    }
    tenants = {name: {t["tenant_id"] for t in digest["tenants"]} for name, digest in got.items()}
    whole = {acme.tenant.pk, bravo.tenant.pk}
    assert tenants == {"oscar": whole, "grace": whole, acme.admin.username: {acme.tenant.pk}}
    assert not Delivery.objects.filter(channel_id=channels["dave"]).exists()


def test_a_platform_admin_sees_every_tenants_leases_and_who_ran_during_them(oscar, dave):
    team = gpu_team("vision")
    gpu = GPUFactory()
    now = timezone.now().replace(second=0, microsecond=0)
    allocation = held_allocation(team.tenant, team.pool, team.dev, now - timedelta(minutes=30),
                                 now - timedelta(minutes=10), gpu=gpu)  # fmt: skip
    OwnerMinuteFactory(gpu=gpu, owner="during", bucket=now - timedelta(minutes=20))
    OwnerMinuteFactory(gpu=gpu, owner="before", bucket=now - timedelta(minutes=40))
    assert list(visible_leases(oscar)) == [allocation.lease]
    assert clients.page(oscar).get(f"/allocations/{allocation.pk}/").status_code == 200
    history = clients.api(oscar).get(f"/api/v1/gpus/{gpu.pk}/history/", {"range": "1h"}).json()
    # What each tenant's own people see, for every tenant: not the card's whole history.
    assert [row["owner"] for row in history["owners"]] == ["during"]
    assert owners_visible_to(dave, [gpu.pk]) is None
    assert not visible_leases(dave).exists()
    assert clients.page(dave).get(f"/allocations/{allocation.pk}/").status_code == 404
