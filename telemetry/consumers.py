from __future__ import annotations

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agents.models import Node
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

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        first = await self.first_message()
        if first is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.send(text_data=first)

    async def first_message(self) -> str | None:
        """The page's whole picture as JSON text, or None when there is no such page."""
        raise NotImplementedError

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return


class FleetConsumer(_LiveConsumer):
    """The fleet page: one tile per node."""

    group = live.FLEET_GROUP

    async def first_message(self) -> str:
        return await database_sync_to_async(live.fleet_picture)()

    async def fleet_nodes(self, event: dict) -> None:
        await self.send(text_data=event["text"])


class NodeConsumer(_LiveConsumer):
    """A node page: that node's cards, pushed only while someone watches."""

    async def first_message(self) -> str | None:
        self.node_id = int(self.scope["url_route"]["kwargs"]["node_id"])
        detail = await database_sync_to_async(self._detail)()
        if detail is None:
            return None
        self.group = live.node_group(self.node_id)
        await sync_to_async(live.watch)(self.node_id)
        return live.encode("node.detail", "node", detail)["text"]

    def _detail(self) -> dict | None:
        node = Node.objects.filter(pk=self.node_id).first()
        return None if node is None else readings.node_detail(node)

    async def node_detail(self, event: dict) -> None:
        await sync_to_async(live.watch)(self.node_id)
        await self.send(text_data=event["text"])
