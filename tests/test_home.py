"""A developer's home (/home/): the data functions, who lands there from "/", who sees
what on it (never another tenant's), and its socket's pushes of live use."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.asgi import application
from quotas.requests import home
from quotas.requests.services import create_request
from telemetry import services
from telemetry.poller import PollResult
from tests import clients
from tests.factories import MembershipFactory, UserFactory, gpu_team, held_allocation
from tests.tenants import BRAVO_SECRET, teams_fixture  # noqa: F401

HOME = "/home/"
AN_HOUR_AGO = timezone.now() - timedelta(hours=1)


def reading(card, util: int, memory_used_mib: int = 5000) -> dict:
    return {"uuid": card.uuid, "index": card.index, "utilization_gpu_pct": util,
            "memory_used_mib": memory_used_mib}  # fmt: skip


def poll(card, *, util: int, report: list[dict] | None = None, also: tuple[dict, ...] = ()):
    """One recorded poll of the card's node: its readings (and ``also`` the node's other
    cards'), and the agent's slices report."""
    snapshot = {"hostname": card.node.name, "gpus": [reading(card, util), *also]}
    if report is not None:
        snapshot["allocations"] = report
    services.record_poll_results([PollResult(card.node_id, snapshot, "", 0.01)])


def slice_report(allocation, used: int, processes: int = 1) -> dict:
    return {"allocation_id": allocation.agent_id, "gpu_uuid": allocation.gpu.uuid,
            "memory_limit_mib": allocation.memory_mib, "compute_pct": allocation.compute_pct,
            "process_count": processes, "memory_used_mib": used}  # fmt: skip


# --- the data functions -------------------------------------------------------------------


@pytest.mark.django_db
def test_live_use_is_the_cards_utilization_and_the_slices_own_memory():
    team = gpu_team("vision")
    card = team.cards[0]
    mine = held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO, compute_pct=30,
                           memory_mib=8192, gpu=card)  # fmt: skip
    poll(card, util=63, report=[slice_report(mine, 3072, processes=2)])
    [row] = home.my_vgpus(team.dev)
    use = row["use"]
    assert (use["card_util_pct"], use["memory_used_mib"], use["process_count"]) == (63, 3072, 2)
    assert (use["compute_pct"], use["memory_mib"], use["memory_used_pct"]) == (30, 8192, 37.5)
    assert use["over_memory"] is False and use["seen_at"] is not None
    assert row["launch_url"] == f"/allocations/{mine.pk}/"


@pytest.mark.django_db
def test_a_slice_its_agent_does_not_report_shows_no_memory_a_whole_card_the_cards():
    team = gpu_team("vision")
    a_slice = held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO, compute_pct=25,
                              memory_mib=4096, gpu=team.cards[0])  # fmt: skip
    card = held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO, whole_card=True,
                           memory_mib=81920, gpu=team.cards[1])  # fmt: skip
    poll(team.cards[0], util=40, also=(reading(team.cards[1], 90, 60000),))
    use = home.live_use([a_slice, card])
    assert use[a_slice.pk]["card_util_pct"] == 40 and use[a_slice.pk]["memory_used_mib"] is None
    assert use[card.pk]["memory_used_mib"] == 60000 and use[card.pk]["process_count"] is None


@pytest.mark.django_db
def test_a_vgpu_without_readings_or_card_has_no_use_and_a_released_one_is_gone():
    team = gpu_team("vision")
    unread = held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO, gpu=team.cards[0])
    cardless = held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO)
    held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO - timedelta(hours=1),
                    released_at=AN_HOUR_AGO, gpu=team.cards[1])  # fmt: skip
    rows = home.my_vgpus(team.dev)
    assert sorted(r["allocation"].pk for r in rows) == sorted([unread.pk, cardless.pk])
    for row in rows:
        assert row["use"]["card_util_pct"] is None and row["use"]["memory_used_mib"] is None


@pytest.mark.django_db
def test_my_vgpus_are_the_ones_i_hold_not_my_teammates():
    team = gpu_team("vision")
    held_allocation(team.tenant, team.pool, team.admin, AN_HOUR_AGO, gpu=team.cards[0])
    assert home.my_vgpus(team.dev) == []
    assert len(home.my_vgpus(team.admin)) == 1


@pytest.mark.django_db
def test_my_requests_are_my_own_open_ones_first():
    team = gpu_team("vision")
    held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO - timedelta(hours=2),
                    released_at=AN_HOUR_AGO)  # fmt: skip
    waiting = create_request(team.dev, **team.ask())
    create_request(team.admin, **team.ask())  # a teammate's
    rows = home.my_requests(team.dev)
    assert [r["req"].requester_id for r in rows] == [team.dev.pk, team.dev.pk]
    assert rows[0]["req"].pk == waiting.pk and rows[1]["req"].state == "released"


@pytest.mark.django_db
def test_quota_left_is_the_limits_less_what_the_tenant_holds_and_my_caps_less_mine():
    team = gpu_team("vision", limit_vgpus=4, limit_compute_pct=200, limit_memory_mib=100_000,
                    limit_gpu_hours=10, user_limit_vgpus=2, guaranteed_vgpus=0,
                    guaranteed_compute_pct=0, guaranteed_memory_mib=0)  # fmt: skip
    an_hour_ago = timezone.now() - timedelta(hours=1)  # not the module's: the hours count
    held_allocation(team.tenant, team.pool, team.dev, an_hour_ago, compute_pct=50,
                    memory_mib=10_000)  # fmt: skip
    held_allocation(team.tenant, team.pool, team.admin, an_hour_ago, compute_pct=100,
                    memory_mib=20_000, whole_card=True)  # fmt: skip
    [left] = home.quota_left(team.dev)
    assert (left.vgpus, left.compute_pct, left.memory_mib) == (2, 50, 70_000)
    # An hour of half a card and an hour of a whole one: 1.5 GPU-hours of 10.
    assert abs(left.gpu_hours - Decimal("8.5")) < Decimal("0.01")
    assert left.mine == {"vgpus": 1, "compute_pct": None, "memory_mib": None}


@pytest.mark.django_db
def test_quota_left_never_goes_below_zero_and_no_budget_is_none():
    team = gpu_team("vision", limit_vgpus=1, guaranteed_vgpus=0, limit_gpu_hours=0)
    for _ in range(2):
        held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO)
    [left] = home.quota_left(team.dev)
    assert left.vgpus == 0 and left.gpu_hours is None


@pytest.mark.django_db
def test_who_lands_on_home(teams, alice, carol, dave):
    bob, erin, andy = teams.user("bob"), teams.user("erin"), teams.user("andy")
    assert home.lands_on_home(bob) and home.lands_on_home(erin) and home.lands_on_home(andy)
    assert not home.lands_on_home(alice)  # a platform admin sees the fleet
    assert not home.lands_on_home(carol)  # a node operator too
    assert not home.lands_on_home(dave)  # in no tenant: nothing at home yet
    viewer = UserFactory(permissions=["agents.view_node"])
    MembershipFactory(user=viewer, tenant=teams.acme)
    assert not home.lands_on_home(viewer)


# --- the pages ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_member_is_sent_from_the_fleet_to_home_and_fleet_viewers_are_not(teams, alice, carol,
                                                                         dave):  # fmt: skip
    response = clients.page(teams.user("bob")).get("/")
    assert response.status_code == 302 and response["Location"] == HOME
    for user in (alice, carol, dave):
        assert clients.page(user).get("/").status_code == 200, user


@pytest.mark.django_db
def test_an_anonymous_visitor_of_home_goes_to_log_in():
    response = clients.page().get(HOME)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.django_db
def test_a_member_sees_their_vgpu_and_request_and_nothing_of_another_tenant(teams):
    bob = teams.user("bob")
    [bobs] = home.my_allocations(bob)
    bellas = home.my_allocations(teams.user("bella")).get()
    body = clients.page(bob).get(HOME).content.decode()
    assert f'data-vgpu-id="{bobs.pk}"' in body
    assert f'data-vgpu-id="{bellas.pk}"' not in body
    assert f'href="/allocations/{bobs.pk}/"' in body  # the launch settings, one click
    assert f'data-request-id="{bobs.lease.gpu_request.pk}"' in body
    assert f'data-request-id="{bellas.lease.gpu_request.pk}"' not in body
    assert 'data-tenant="acme"' in body and BRAVO_SECRET not in body and "bravo" not in body


@pytest.mark.django_db
def test_the_sidebar_offers_my_gpus_and_the_fleet_only_to_those_who_see_both(teams, alice):
    bob_page = clients.page(teams.user("bob")).get(HOME).content.decode()
    assert 'href="/home/"' in bob_page and ">Fleet<" not in bob_page
    admin_page = clients.page(alice).get("/").content.decode()
    assert 'href="/home/"' in admin_page and ">Fleet<" in admin_page


@pytest.mark.django_db
def test_home_has_empty_states_for_nothing_yet(dave):
    team = gpu_team("vision")
    fresh = clients.page(team.dev).get(HOME).content.decode()
    assert "No vGPUs yet." in fresh and "No requests yet." in fresh
    assert 'data-pool="' in fresh  # the team's quota, untouched
    alone = clients.page(dave).get(HOME).content.decode()
    assert "You are in no tenant yet." in alone


@pytest.mark.django_db
def test_home_answers_its_live_part_alone(teams):
    part = clients.page(teams.user("bob")).get(HOME + "?part=1").content.decode()
    assert 'id="my-vgpus"' in part and "<html" not in part


@pytest.mark.django_db
def test_home_speaks_chinese():
    team = gpu_team("vision")
    body = clients.page(team.dev).get(HOME, HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert 'lang="zh-hans"' in body


# --- the socket ---------------------------------------------------------------------------


def _headers(user) -> list[tuple[bytes, bytes]]:
    return [(b"origin", b"http://localhost"), (b"host", b"localhost"), clients.cookie_header(user)]


def listen(users, act) -> list[list[dict]]:
    """Connect each user's home socket, run ``act``, collect what each got meanwhile."""

    headers = [_headers(user) for user in users]

    async def run():
        sockets = []
        for each in headers:
            communicator = WebsocketCommunicator(application, "/ws/home/", headers=each)
            connected, _ = await communicator.connect(timeout=5)
            assert connected
            sockets.append(communicator)
        await sync_to_async(act)()
        results = []
        for communicator in sockets:
            got = []
            while not await communicator.receive_nothing(timeout=0.5):
                got.append(json.loads(await communicator.receive_from()))
            await communicator.disconnect()
            results.append(got)
        return results

    return async_to_sync(run)()


@pytest.mark.django_db(transaction=True)
def test_the_home_socket_pushes_a_poll_cycles_use_to_the_holder_alone():
    team, other = gpu_team("vision"), gpu_team("speech")
    card = team.cards[0]
    mine = held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO, compute_pct=30,
                           memory_mib=8192, gpu=card)  # fmt: skip
    theirs = held_allocation(other.tenant, other.pool, other.dev, AN_HOUR_AGO, gpu=card)

    def act():
        poll(card, util=71, report=[slice_report(mine, 2048), slice_report(theirs, 512)])

    dev, teammate, outsider = listen([team.dev, team.admin, other.dev], act)
    # The first message: what the page holds, at connect; then the cycle's.
    assert dev[0]["type"] == "home.use" and [v["id"] for v in dev[0]["vgpus"]] == [mine.pk]
    pushed = [m for m in dev[1:] if m["type"] == "home.use"]
    assert pushed and pushed[-1]["vgpus"][0]["card_util_pct"] == 71
    assert pushed[-1]["vgpus"][0]["memory_used_mib"] == 2048
    assert all(m["vgpus"] == [] for m in teammate)  # holds nothing: nothing of the dev's
    assert all(v["id"] == theirs.pk for m in outsider for v in m["vgpus"])


@pytest.mark.django_db(transaction=True)
def test_the_home_socket_hears_the_holders_request_steps(eager_tasks):
    team = gpu_team("vision")
    done = {}

    def act():
        done["req"] = create_request(team.dev, **team.ask())

    [got] = listen([team.dev], act)
    assert [m["request"] for m in got if "request" in m] == [done["req"].pk]


def test_an_anonymous_home_socket_is_closed():
    async def run():
        headers = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
        communicator = WebsocketCommunicator(application, "/ws/home/", headers=headers)
        connected, code = await communicator.connect(timeout=5)
        return connected, code

    connected, code = async_to_sync(run)()
    assert not connected or code == 4401


@pytest.mark.django_db
def test_home_costs_the_same_queries_for_one_vgpu_as_for_many():
    team = gpu_team("vision", cards=2)
    client = clients.page(team.dev)

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(HOME).status_code == 200
        return len(queries)

    held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO, gpu=team.cards[0])
    one = count()
    for i in range(5):
        held_allocation(team.tenant, team.pool, team.dev, AN_HOUR_AGO, compute_pct=10,
                        gpu=team.cards[i % 2])  # fmt: skip
    assert count() == one
