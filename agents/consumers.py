from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agents import readings
from agents.services import FLEET_GROUP

# Close code for "log in first", in the application range 4000-4999.
CLOSE_UNAUTHENTICATED = 4401


class FleetConsumer(AsyncJsonWebsocketConsumer):
    """Live fleet readings for the dashboard: the full picture once, then updates.

    Updates arrive through the channel layer after each poll commits; the
    consumer never polls the database itself.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(FLEET_GROUP, self.channel_name)
        await self.accept()
        nodes = await database_sync_to_async(readings.fleet_payload)()
        await self.send_json({"type": "fleet.snapshot", "nodes": nodes})

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(FLEET_GROUP, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        # The dashboard only listens; anything it sends is ignored.
        return

    async def fleet_update(self, event: dict) -> None:
        await self.send_json({"type": "fleet.update", "nodes": event["nodes"]})
