"""Drain, undrain and clear a cordon from the pool page: POST forms with CSRF, only for
those with ``pools.change_pool`` (as the API operations), audited; refused ones change
nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.choices import NodeState
from agents.models import Node
from audit.models import AuditEntry
from pools.choices import AllocationState
from pools.models import PoolCard
from tests import clients
from tests.factories import PoolFactory, UserFactory, online_cards, placed_lease

pytestmark = pytest.mark.django_db


@pytest.fixture
def cards():
    return online_cards(1), online_cards(1)


@pytest.fixture
def pool(cards):
    return PoolFactory(name="train", slug="train", cards=[*cards[0], *cards[1]])


@pytest.fixture
def lease(pool, bob):
    return placed_lease(pool, bob, compute_pct=30, memory_mib=8192, label="bert")


def _urls(pool, node, gpu) -> dict[str, str]:
    return {
        "drain": reverse("pools:node_drain", args=[pool.slug, node.pk]),
        "undrain": reverse("pools:node_undrain", args=[pool.slug, node.pk]),
        "clear": reverse("pools:card_clear_cordon", args=[pool.slug, gpu.pk]),
    }


def test_an_admin_drains_a_node_from_the_page_and_its_vgpus_move(alice, pool, lease):
    allocation = lease.allocations.get()
    node = allocation.gpu.node
    page = clients.page(alice).get(pool.get_absolute_url()).content.decode()
    assert reverse("pools:node_drain", args=[pool.slug, node.pk]) in page
    response = clients.page(alice).post(_urls(pool, node, allocation.gpu)["drain"], follow=True)
    assert response.status_code == 200
    node.refresh_from_db()
    allocation.refresh_from_db()
    assert node.state == NodeState.DRAINING
    assert allocation.state == AllocationState.ACTIVE and allocation.gpu.node_id != node.pk
    assert AuditEntry.objects.filter(action="node.drained", actor=alice).count() == 1
    assert "1 vGPU(s) moved" in response.content.decode()
    # The page now offers to undrain it; undraining lets it take slices again.
    assert _urls(pool, node, allocation.gpu)["undrain"] in response.content.decode()
    clients.page(alice).post(_urls(pool, node, allocation.gpu)["undrain"])
    node.refresh_from_db()
    assert node.state == NodeState.ONLINE
    assert AuditEntry.objects.filter(action="node.undrained", actor=alice).count() == 1


def test_an_admin_clears_a_cordon_from_the_page(alice, pool, cards):
    (gpu,), _ = cards
    PoolCard.objects.filter(gpu=gpu).update(cordoned_at=timezone.now(), cordon_reason="XID 79")
    page = clients.page(alice).get(pool.get_absolute_url()).content.decode()
    url = _urls(pool, gpu.node, gpu)["clear"]
    assert url in page
    assert clients.page(alice).post(url).status_code == 302
    assert PoolCard.objects.get(gpu=gpu).cordoned_at is None
    assert AuditEntry.objects.filter(action="pool_card.cordon_cleared", actor=alice).exists()
    assert url not in clients.page(alice).get(pool.get_absolute_url()).content.decode()


@pytest.mark.parametrize("name", ["bob", "carol", "dave"])
def test_without_the_pool_permission_the_buttons_are_absent_and_posts_refused(
    request, name, pool, cards, lease
):
    user = request.getfixturevalue(name)
    (gpu,), _ = cards
    PoolCard.objects.filter(gpu=gpu).update(cordoned_at=timezone.now(), cordon_reason="XID 79")
    urls = _urls(pool, gpu.node, gpu)
    client = clients.page(user)  # signing in is audited: count after it
    page = client.get(pool.get_absolute_url()).content.decode()
    assert not any(url in page for url in urls.values())
    before = list(AuditEntry.objects.values_list("pk", flat=True))
    for url in urls.values():
        assert client.post(url).status_code == 403
    gpu.node.refresh_from_db()
    assert gpu.node.state == NodeState.ONLINE
    assert PoolCard.objects.get(gpu=gpu).cordoned_at is not None
    assert lease.allocations.get().state == AllocationState.ACTIVE
    assert list(AuditEntry.objects.values_list("pk", flat=True)) == before


def test_the_forms_need_the_csrf_token_and_a_post(alice, pool, cards):
    (gpu,), _ = cards
    urls = _urls(pool, gpu.node, gpu)
    guarded = clients.page(alice, enforce_csrf_checks=True)
    assert guarded.post(urls["drain"]).status_code == 403
    assert clients.page(alice).get(urls["drain"]).status_code == 405
    gpu.node.refresh_from_db()
    assert gpu.node.state == NodeState.ONLINE


def test_a_node_or_card_outside_the_pool_is_not_found_and_nothing_changes(alice, pool):
    (other,) = online_cards(1)
    urls = _urls(pool, other.node, other)
    for url in urls.values():
        assert clients.page(alice).post(url).status_code == 404
    other.node.refresh_from_db()
    assert other.node.state == NodeState.ONLINE
    assert not AuditEntry.objects.filter(action__startswith="node.").exists()


def test_undraining_a_node_that_is_not_draining_says_so_and_changes_nothing(alice, pool, cards):
    (gpu,), _ = cards
    response = clients.page(alice).post(_urls(pool, gpu.node, gpu)["undrain"], follow=True)
    assert "is not draining" in response.content.decode()
    assert not AuditEntry.objects.filter(action="node.undrained").exists()


@pytest.fixture
def wide_pool():
    """Two nodes with three cards each in the pool (and a fourth of each outside it), and
    a third node whose three cards are in another pool."""
    nodes = [online_cards(4), online_cards(4)]
    elsewhere = online_cards(3)
    PoolFactory(name="other", slug="other", cards=elsewhere)
    pool = PoolFactory(name="wide", slug="wide", cards=[*nodes[0][:3], *nodes[1][:3]])
    return pool, [cards[0].node for cards in nodes], elsewhere[0].node


@pytest.fixture
def operator():
    """Not staff, not a superuser: only the pools permission the drain buttons need."""
    return UserFactory(username="olga", permissions=["pools.change_pool"])


def test_nodes_with_several_cards_in_the_pool_drain_and_undrain_from_its_page(
    operator, bob, wide_pool
):
    pool, (first, second), _ = wide_pool
    lease = placed_lease(pool, bob, compute_pct=30, memory_mib=8192, label="bert")
    allocation = lease.allocations.get()
    on = allocation.gpu.node
    client = clients.page(operator)
    for node in (first, second):
        assert (
            reverse("pools:node_drain", args=[pool.slug, node.pk])
            in client.get(pool.get_absolute_url()).content.decode()
        )

    drained = client.post(reverse("pools:node_drain", args=[pool.slug, on.pk]), follow=True)
    assert drained.status_code == 200
    assert drained.redirect_chain == [(pool.get_absolute_url(), 302)]
    assert f"Node {on.name} is draining: 1 vGPU(s) moved, 0 waiting for room." in (
        drained.content.decode()
    )
    on.refresh_from_db()
    allocation.refresh_from_db()
    assert on.state == NodeState.DRAINING
    assert allocation.state == AllocationState.ACTIVE and allocation.gpu.node_id != on.pk
    [entry] = AuditEntry.objects.filter(action="node.drained")
    assert (entry.actor, entry.target_id) == (operator, str(on.pk))

    undrained = client.post(reverse("pools:node_undrain", args=[pool.slug, on.pk]), follow=True)
    assert undrained.redirect_chain == [(pool.get_absolute_url(), 302)]
    assert f"Node {on.name} takes new vGPUs again." in undrained.content.decode()
    on.refresh_from_db()
    assert on.state == NodeState.ONLINE
    [entry] = AuditEntry.objects.filter(action="node.undrained")
    assert (entry.actor, entry.target_id) == (operator, str(on.pk))


def test_a_node_of_another_pool_is_not_found_from_this_pools_page(operator, wide_pool):
    pool, _, elsewhere = wide_pool
    client = clients.page(operator)
    before = list(AuditEntry.objects.values_list("pk", flat=True))
    for name in ("pools:node_drain", "pools:node_undrain"):
        assert client.post(reverse(name, args=[pool.slug, elsewhere.pk])).status_code == 404
    elsewhere.refresh_from_db()
    assert elsewhere.state == NodeState.ONLINE
    assert list(AuditEntry.objects.values_list("pk", flat=True)) == before


def test_a_member_without_the_permission_cannot_drain_or_undrain_a_many_card_node(bob, wide_pool):
    pool, (first, second), _ = wide_pool
    Node.objects.filter(pk=second.pk).update(state=NodeState.DRAINING)
    client = clients.page(bob)
    before = list(AuditEntry.objects.values_list("pk", flat=True))
    assert client.post(reverse("pools:node_drain", args=[pool.slug, first.pk])).status_code == 403
    undrain = reverse("pools:node_undrain", args=[pool.slug, second.pk])
    assert client.post(undrain).status_code == 403
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state) == (NodeState.ONLINE, NodeState.DRAINING)
    assert list(AuditEntry.objects.values_list("pk", flat=True)) == before
