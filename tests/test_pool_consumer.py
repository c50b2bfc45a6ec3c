"""The pool page's websocket through the real ASGI application and Redis channel layer."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from portal.asgi import application
from telemetry.interface import PollCycle, poll_cycle_recorded
from tests import clients
from tests.factories import PoolFactory, online_cards, placed_lease
from tests.test_fleet_consumer import _headers

pytestmark = pytest.mark.django_db(transaction=True)


async def _open(headers, path):
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=5)
    return communicator, connected, code


def test_anonymous_and_unknown_pools_are_closed():
    pool = PoolFactory()

    async def run(path, headers):
        communicator, connected, code = await _open(headers, path)
        await communicator.disconnect()
        return connected, code

    assert async_to_sync(run)(f"/ws/pools/{pool.pk}/", _headers()) == (False, 4401)


def test_unknown_pool_is_closed_with_not_found(bob):
    headers = _headers(clients.cookie_header(bob))

    async def run():
        communicator, connected, code = await _open(headers, "/ws/pools/999999/")
        await communicator.disconnect()
        return connected, code

    assert async_to_sync(run)() == (False, 4404)


def test_a_slice_placed_after_connecting_arrives_with_owners_as_the_viewer_sees_them(bob, carol):
    cards = online_cards(2)
    pool = PoolFactory(cards=cards)
    bobs, carols = _headers(clients.cookie_header(bob)), _headers(clients.cookie_header(carol))

    async def run():
        mine, connected, _ = await _open(bobs, f"/ws/pools/{pool.pk}/")
        theirs, _, _ = await _open(carols, f"/ws/pools/{pool.pk}/")
        assert connected
        first = [json.loads(await c.receive_from(timeout=5)) for c in (mine, theirs)]
        usage = [json.loads(await c.receive_from(timeout=5)) for c in (mine, theirs)]
        await sync_to_async(placed_lease)(pool, bob, compute_pct=25, memory_mib=2048, label="x")
        after = [json.loads(await c.receive_from(timeout=5)) for c in (mine, theirs)]
        await sync_to_async(poll_cycle_recorded.send)(
            sender=PollCycle, cycle=PollCycle(timezone.now(), (cards[0].node_id,))
        )
        readings = [json.loads(await c.receive_from(timeout=5)) for c in (mine, theirs)]
        for c in (mine, theirs):
            await c.disconnect()
        return first, usage, after, readings

    first, usage, after, readings = async_to_sync(run)()
    assert [m["type"] for m in first] == ["pool.picture", "pool.picture"]
    assert all(not c["slices"] for m in first for c in m["picture"]["cards"])
    assert [m["type"] for m in usage] == ["pool.usage", "pool.usage"]
    owners = [[s["owner"] for c in m["picture"]["cards"] for s in c["slices"]] for m in after]
    assert owners == [["bob · x"], [None]]
    assert [m["type"] for m in readings] == ["pool.usage", "pool.usage"]
