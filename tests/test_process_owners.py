"""Process owners in history: shown to those allowed, the card's usage to every member.

alice (superuser) and carol (granted telemetry.view_process_owners) see who ran on a card;
bob (a member) and dave (staff without the permission) see the same usage without names.
"""

from __future__ import annotations

import pytest
from django.db.models import Q

from agents.models import GPU
from telemetry import permissions
from tests import clients
from tests.api import ANONYMOUS_REFUSED
from tests.factories import GPUFactory, GpuMinuteFactory, OwnerMinuteFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def card() -> GPU:
    """A card with a minute of history, used by two Unix users."""
    gpu = GPUFactory()
    GpuMinuteFactory(gpu=gpu, util_avg=50.0, util_max=70.0, memory_used_avg_mib=3000.0)
    OwnerMinuteFactory(gpu=gpu, owner="frank", memory_used_avg_mib=2000.0)
    OwnerMinuteFactory(gpu=gpu, owner="grace", memory_used_avg_mib=1000.0)
    return gpu


def _urls(card: GPU) -> list[str]:
    return [f"/api/v1/gpus/{card.pk}/history/", f"/api/v1/nodes/{card.node_id}/history/"]


def _get(user, url: str):
    return clients.api(user).get(url, {"range": "1h"})


@pytest.mark.parametrize("actor", ["alice", "carol"], indirect=True)
def test_admins_and_those_granted_see_the_process_owners(actor, card):
    for url in _urls(card):
        data = _get(actor, url).json()
        assert [row["owner"] for row in data["owners"]] == ["frank", "grace"], url
        assert data["points"][0]["util_avg"] == 50.0


@pytest.mark.parametrize("actor", ["bob", "dave"], indirect=True)
def test_members_see_the_cards_usage_without_its_owners(actor, card):
    for url in _urls(card):
        response = _get(actor, url)
        assert response.status_code == 200, url
        data = response.json()
        assert data["owners"] == [] and data["points"][0]["util_avg"] == 50.0
        assert "frank" not in response.content.decode()


def test_anonymous_callers_get_no_history(card):
    for url in _urls(card):
        assert _get(None, url).status_code in ANONYMOUS_REFUSED


def test_an_app_above_telemetry_widens_what_a_member_sees(bob, card, monkeypatch):
    # What the tenancy issue will register: here, a member sees their own namesake's rows.
    monkeypatch.setattr(permissions, "_grants", [])
    permissions.grant_owners(lambda user, gpu_ids: None)
    permissions.grant_owners(lambda user, gpu_ids: Q(owner="grace", gpu_id__in=gpu_ids))
    data = _get(bob, _urls(card)[0]).json()
    assert [row["owner"] for row in data["owners"]] == ["grace"]
    # A rule that grants everything is everything, whatever the others grant.
    permissions.grant_owners(lambda user, gpu_ids: Q())
    assert permissions.visible_owners(bob, [card.pk]) == Q()


def test_nobody_anonymous_sees_owners_whatever_is_registered(card, monkeypatch):
    from django.contrib.auth.models import AnonymousUser

    monkeypatch.setattr(permissions, "_grants", [lambda user, gpu_ids: Q()])
    assert permissions.visible_owners(AnonymousUser(), [card.pk]) is None
