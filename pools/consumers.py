from __future__ import annotations

import orjson
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.serializers.json import DjangoJSONEncoder

from pools import capacity, live
from pools.models import Pool

# As telemetry's consumers: log in first; no such pool.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


def _text(kind: str, pool_id: int, key: str, value) -> str:
    return orjson.dumps(
        {"type": kind, "pool": pool_id, key: value}, default=DjangoJSONEncoder().default
    ).decode()


class PoolConsumer(AsyncJsonWebsocketConsumer):
    """A pool page: its cards and slices when they change, its readings every cycle.

    Every signed-in member reads pools (pools.permissions); owner labels are the viewer's
    own (``visible_leases``), so on ``pool.changed`` each socket reads the picture as its
    user. Nothing here polls: the messages arrive after commits and poll cycles.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.pool_id = int(self.scope["url_route"]["kwargs"]["pool_id"])
        first = await database_sync_to_async(self._picture)()
        if first is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = live.pool_group(self.pool_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await sync_to_async(live.watch)(self.pool_id)
        await self.accept()
        await self.send(text_data=first)
        usage = await database_sync_to_async(capacity.usage)(self.pool_id)
        await self.send(text_data=_text("pool.usage", self.pool_id, "usage", usage))

    def _picture(self) -> str | None:
        pool = Pool.objects.filter(pk=self.pool_id).first()
        if pool is None:
            return None
        return _text("pool.picture", pool.pk, "picture", capacity.picture(pool, self.scope["user"]))

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs) -> None:
        return

    async def pool_changed(self, event: dict) -> None:
        text = await database_sync_to_async(self._picture)()
        if text is None:  # the pool was deleted
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.send(text_data=text)

    async def pool_usage(self, event: dict) -> None:
        await sync_to_async(live.watch)(self.pool_id)
        await self.send(text_data=event["text"])
