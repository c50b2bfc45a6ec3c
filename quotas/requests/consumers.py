"""The requests pages' socket: events of one's own requests, and of the tenants one
approves for.

Groups are decided at connect from the memberships then (a changed role takes effect
at the next connect): the user's own group, the group of each tenant where they are an
approver or admin, and everything for platform admins. A member of tenant A therefore
never joins tenant B's group. Events carry only ids and states; the page then fetches
what it shows through its own permission check. Nothing here polls the database.
"""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from quotas.permissions import is_platform_admin, tenant_ids_of
from quotas.requests.notices import ALL_GROUP, tenant_group, user_group

CLOSE_UNAUTHENTICATED = 4401


class RequestConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.joined = await database_sync_to_async(self._groups)(user)
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    @staticmethod
    def _groups(user) -> list[str]:
        if is_platform_admin(user):
            return [user_group(user.pk), ALL_GROUP]
        deciding = tenant_ids_of(user, deciding=True).values_list("tenant_id", flat=True)
        return [user_group(user.pk), *(tenant_group(t) for t in sorted(deciding))]

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        return  # the browser only listens

    async def request_event(self, event: dict) -> None:
        await self.send(text_data=event["text"])
