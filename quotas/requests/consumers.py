"""The requests pages' socket: events of one's own requests, and of the tenants one
approves for.

Groups are decided at connect from the memberships then (a changed role takes effect
at the next connect): the user's own group, the group of each tenant where they are an
approver or admin, and everything for platform admins. A member of tenant A therefore
never joins tenant B's group. Events carry only ids and states; the page then fetches
what it shows through its own permission check. Nothing here polls the database.
"""

from __future__ import annotations

import asyncio
import contextlib

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from quotas.permissions import is_platform_admin, tenant_ids_of
from quotas.requests import home, home_live
from quotas.requests.notices import ALL_GROUP, tenant_group, user_group

CLOSE_UNAUTHENTICATED = 4401


class _RequestListener(AsyncWebsocketConsumer):
    """A socket that joins ``self.joined`` groups and passes request events on."""

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", ()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None) -> None:
        return  # the browser only listens

    async def request_event(self, event: dict) -> None:
        await self.send(text_data=event["text"])


class RequestConsumer(_RequestListener):
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


class HomeConsumer(_RequestListener):
    """A developer's home: its user's request events (the page then fetches its part
    again) and, after each poll cycle, the use of their own vGPUs, pushed to them alone.
    While open it keeps its user among the watched homes (``home_live.watch``), renewed
    on a timer: a Redis mark, no database poll."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.joined = [user_group(user.pk), home_live.home_group(user.pk)]
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        self.renewing = asyncio.ensure_future(self._keep_watching(user.pk))
        first = await database_sync_to_async(self._first)(user)
        await self.send(text_data=first["text"])

    @staticmethod
    def _first(user) -> dict:
        allocations = list(home.my_allocations(user))
        use = home.live_use(allocations)
        return home_live.use_message([home.use_row(use[a.pk]) for a in allocations])

    async def _keep_watching(self, user_id: int) -> None:
        while True:
            await sync_to_async(home_live.watch)(user_id)
            await asyncio.sleep(home_live.WATCH_TTL_S / 3)

    async def disconnect(self, code: int) -> None:
        if renewing := getattr(self, "renewing", None):
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
        await super().disconnect(code)

    async def home_use(self, event: dict) -> None:
        await self.send(text_data=event["text"])
