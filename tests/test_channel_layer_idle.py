"""The Redis channel layer under redis-py 8, which brought in a 5 s socket timeout:

- a live socket that hears nothing for longer than the layer's 5 s ``BZPOPMIN`` stays
  open (the read timed out first now and then and closed it with 1011);
- a receive cancelled while a command is in flight ends (with a socket timeout set,
  redis-py sends through ``asyncio.wait_for``, which on Python 3.11 can return the
  result and swallow the cancellation; the receive then looped on forever and the
  consumer of a closed socket never finished)."""

from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

# The suite runs on Redis (tests/conftest.py exits without it): the layer is channels_redis.


class _Listener(AsyncJsonWebsocketConsumer):
    async def connect(self):
        await self.channel_layer.group_add("idle-test", self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        await self.channel_layer.group_discard("idle-test", self.channel_name)

    async def note(self, event):
        await self.send_json({"n": event["n"]})


def test_an_idle_socket_survives_three_pops_and_still_hears_its_group():
    async def run():
        communicator = WebsocketCommunicator(_Listener.as_asgi(), "/ws/idle/")
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        layer = get_channel_layer()
        # Three times the pop: before, one of the turns nearly always lost the race.
        await asyncio.sleep(3 * 5 + 1)
        assert not communicator.future.done(), "the consumer ended while idle"
        await layer.group_send("idle-test", {"type": "note", "n": 1})
        assert await communicator.receive_json_from(timeout=5) == {"n": 1}
        await communicator.disconnect()

    async_to_sync(run)()


def test_a_receive_cancelled_at_any_point_of_its_commands_ends():
    async def run():
        layer = get_channel_layer()
        # Each turn of the loop a little further in: the eval's send, its read, the pop.
        for ticks in range(1, 25):
            channel = await layer.new_channel()
            task = asyncio.ensure_future(layer.receive(channel))
            for _ in range(ticks):
                await asyncio.sleep(0)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=3)
            assert done, f"after {ticks} ticks the receive ignored its cancellation"
            assert task.cancelled()

    async_to_sync(run)()
