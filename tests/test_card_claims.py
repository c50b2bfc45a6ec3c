"""A card UUID reported by a second node stays where it is, flagged on both, until an admin
decides."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.choices import NodeState
from agents.models import GPU, Node
from telemetry import readings, services
from telemetry.models import CardClaim
from tests.factories import NodeFactory
from tests.test_fleet_services import gpu, ok, snapshot


@pytest.fixture
def nodes(db) -> tuple[Node, Node]:
    holder, second = NodeFactory(name="holder"), NodeFactory(name="second")
    services.record_poll_results([ok(holder, snapshot("h", gpu("GPU-X", 0), gpu("GPU-H", 1)))])
    return holder, second


def cycle(holder: Node, second: Node, *, holder_reports=("GPU-X", "GPU-H"), second_reports=()):
    """One cycle; the holder and the second node in separate chunks, as Celery splits them."""
    services.record_poll_results(
        [ok(holder, snapshot("h", *[gpu(u, i) for i, u in enumerate(holder_reports)]))]
    )
    services.record_poll_results(
        [ok(second, snapshot("s", *[gpu(u, 5 + i) for i, u in enumerate(second_reports)]))]
    )
    holder.refresh_from_db()
    second.refresh_from_db()


def test_a_card_reported_by_a_second_node_stays_and_both_nodes_say_so(nodes, store):
    holder, second = nodes
    for _ in range(3):  # stable across cycles and chunks, in either order
        cycle(holder, second, second_reports=("GPU-X", "GPU-S"))
    card = GPU.objects.get(uuid="GPU-X")
    assert (card.node, card.index) == (holder, 0)
    assert GPU.objects.get(uuid="GPU-S").node == second
    assert "GPU GPU-X is also reported by node second" in holder.last_error
    assert "GPU GPU-X is recorded on node holder, yet this node reports it too" in (
        second.last_error
    )
    assert holder.state == second.state == NodeState.ONLINE
    # The card's readings are its holder's: the second node's copy is not shown with it.
    assert set(readings.latest_for([second.pk])[second.pk]["gpus"]) == {"GPU-S"}


def test_the_conflict_shows_on_the_node_page_and_in_the_node_api(nodes, client, alice):
    holder, second = nodes
    for _ in range(2):  # the holder hears of it at its next answer
        cycle(holder, second, second_reports=("GPU-X",))
    client.force_login(alice)
    for node in (holder, second):
        page = client.get(reverse("telemetry:node", args=[node.pk]))
        assert "GPU GPU-X is" in page.content.decode()
        answer = client.get(f"/api/v1/nodes/{node.pk}/").json()
        assert "GPU GPU-X" in answer["last_error"]


def test_the_conflict_ends_when_the_second_node_stops_reporting_the_card(nodes):
    holder, second = nodes
    cycle(holder, second, second_reports=("GPU-X",))
    cycle(holder, second, second_reports=("GPU-S",))
    cycle(holder, second, second_reports=("GPU-S",))
    assert not CardClaim.objects.exists()
    assert (holder.last_error, second.last_error) == ("", "")
    assert GPU.objects.get(uuid="GPU-X").node == holder


def test_once_an_admin_deletes_the_card_the_next_answer_records_it_where_reported(
    nodes, client, alice
):
    holder, second = nodes
    cycle(holder, second, holder_reports=("GPU-H",), second_reports=("GPU-X",))
    client.force_login(alice)
    card = GPU.objects.get(uuid="GPU-X")
    client.post(reverse("admin:agents_gpu_delete", args=[card.pk]), {"post": "yes"})
    cycle(holder, second, holder_reports=("GPU-H",), second_reports=("GPU-X",))
    assert GPU.objects.get(uuid="GPU-X").node == second
    assert (holder.last_error, second.last_error) == ("", "")


def test_an_admin_moves_the_card_to_the_node_that_reports_it(nodes, client, alice, bob):
    holder, second = nodes
    cycle(holder, second, holder_reports=("GPU-H",), second_reports=("GPU-X",))
    [claim] = CardClaim.objects.all()
    url = reverse("admin:telemetry_cardclaim_changelist")
    form = {"action": "move_to_reporting_node", "_selected_action": [claim.pk]}
    client.force_login(alice)
    listing = client.get(url).content.decode()
    assert "GPU-X" in listing and "holder" in listing and "second" in listing
    client.post(url, form)
    assert GPU.objects.get(uuid="GPU-X").node == second
    assert not CardClaim.objects.exists()
    cycle(holder, second, holder_reports=("GPU-H",), second_reports=("GPU-X",))
    assert GPU.objects.get(uuid="GPU-X").index == 5
    assert (holder.last_error, second.last_error) == ("", "")


def test_only_an_admin_who_may_change_cards_can_move_one(nodes, client, dave):
    holder, second = nodes
    cycle(holder, second, second_reports=("GPU-X",))
    [claim] = CardClaim.objects.all()
    client.force_login(dave)
    url = reverse("admin:telemetry_cardclaim_changelist")
    client.post(url, {"action": "move_to_reporting_node", "_selected_action": [claim.pk]})
    assert GPU.objects.get(uuid="GPU-X").node == holder


def test_a_new_card_reported_by_two_nodes_in_one_cycle_is_recorded_once_and_flagged(db):
    first, other = NodeFactory(name="first"), NodeFactory(name="other")
    services.record_poll_results(
        [ok(other, snapshot("o", gpu("GPU-N", 2))), ok(first, snapshot("f", gpu("GPU-N", 0)))]
    )
    card = GPU.objects.get(uuid="GPU-N")
    assert card.node == min((first, other), key=lambda n: n.pk)
    claimant = other if card.node == first else first
    claimant.refresh_from_db()
    assert "GPU GPU-N is recorded on node" in claimant.last_error
