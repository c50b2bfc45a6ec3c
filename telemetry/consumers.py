from __future__ import annotations

import time

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from agents.models import Node
from agents.permissions import can_see_agent_details
from telemetry import live, readings

# Close codes in the application range 4000-4999: log in first; no such node.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


class _LiveConsumer(AsyncJsonWebsocketConsumer):
    """Sends its page's picture once on connect, then what the publisher pushes.

    Updates arrive through the channel layer after each poll commits; a consumer
    never polls the database itself. Whatever the browser sends is ignored.
    """

    group: str
    errors_group: str  # node managers only: the agents' error texts
    # A page that always exists is accepted before its picture is made: daphne drops a
    # socket it has not accepted within its handshake timeout (5 s), and on a busy
    # machine the picture alone came near that. One that may not exist checks first.
    accept_early = False

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if self.accept_early:
            await self.accept()
        first = await self.first_message()
        if first is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        messages, self.joined = [first], [self.group]
        # Decided at connect: a changed permission takes effect at the next connect.
        if await database_sync_to_async(can_see_agent_details)(user):
            messages.append(await self.errors_message())
            self.joined.append(self.errors_group)
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        if not self.accept_early:
            await self.accept()
        for text in messages:
            await self.send(text_data=text)

    async def first_message(self) -> str | None:
        """The page's whole picture as JSON text, or None when there is no such page."""
        raise NotImplementedError

    async def errors_message(self) -> str:
        """The error texts of the page's nodes, for node managers, as JSON text."""
        raise NotImplementedError

    async def forward(self, text: str) -> None:
        """Send a pushed message on as it came (encoded once by the publisher)."""
        if settings.LIVE_STAGE_STAMPS:
            # bench/live's stage timing: when this consumer took the message from the layer.
            text = f'{text[:-1]},"handled_at":{time.time():.6f}}}'
        await self.send(text_data=text)

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return


class FleetConsumer(_LiveConsumer):
    """The fleet page: one tile per node."""

    group = live.FLEET_GROUP
    errors_group = live.FLEET_ERRORS_GROUP
    accept_early = True

    async def first_message(self) -> str:
        return await database_sync_to_async(live.fleet_picture)()

    async def errors_message(self) -> str:
        return await database_sync_to_async(live.fleet_errors_picture)()

    async def fleet_nodes(self, event: dict) -> None:
        await self.forward(event["text"])

    async def fleet_errors(self, event: dict) -> None:
        await self.forward(event["text"])


class NodeConsumer(_LiveConsumer):
    """A node page: that node's cards, pushed only while someone watches."""

    async def first_message(self) -> str | None:
        self.node_id = int(self.scope["url_route"]["kwargs"]["node_id"])
        detail = await database_sync_to_async(self._detail)()
        if detail is None:
            return None
        self.group = live.node_group(self.node_id)
        self.errors_group = live.node_errors_group(self.node_id)
        await sync_to_async(live.watch)(self.node_id)
        self.watched_at = time.monotonic()
        return live.encode("node.detail", "node", detail)["text"]

    def _detail(self) -> dict | None:
        node = Node.objects.filter(pk=self.node_id).first()
        if node is None:
            return None
        self.last_error = node.last_error
        return readings.node_detail(node)

    async def errors_message(self) -> str:
        errors = {self.node_id: self.last_error} if self.last_error else {}
        return live.encode_errors("node.errors", errors)["text"]

    async def node_detail(self, event: dict) -> None:
        # The watch lasts WATCH_TTL_S: refreshed a few times within it, not on every push
        # (each refresh is a thread hop and a Redis call ahead of the page's update).
        if time.monotonic() - self.watched_at > live.WATCH_TTL_S / 4:
            await sync_to_async(live.watch)(self.node_id)
            self.watched_at = time.monotonic()
        await self.forward(event["text"])

    async def node_errors(self, event: dict) -> None:
        await self.forward(event["text"])
