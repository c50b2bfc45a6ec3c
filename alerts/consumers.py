"""The dashboard's alert socket: a push when an event the viewer may see opens, is
acknowledged or resolves.

Groups are decided at connect from the memberships then (``alerts.permissions.
event_groups``, the same rule as ``visible_events``): a member of tenant A never joins
tenant B's group. Messages carry only an event's id and state; the page fetches the
strip again through its own permission check. Nothing here polls the database.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from alerts.permissions import event_groups

CLOSE_UNAUTHENTICATED = 4401


class AlertEventConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.joined = await database_sync_to_async(event_groups)(user)
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        return  # the browser only listens

    async def alert_event(self, event: dict) -> None:
        await self.send(text_data=event["text"])
