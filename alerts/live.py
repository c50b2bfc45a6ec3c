"""Alert events pushed to the dashboards that may see them, after the change commits.

Groups follow ``alerts.permissions.visible_events``: platform admins join ``alerts.all``;
platform events (no tenant) go to ``alerts.platform``, which only node operators join;
a tenant's events go to ``alerts.tenant.<id>``, which only its members join. The message
carries the event's id and state only: the page then fetches what it shows through its
own permission check, in its reader's language. Only state changes are pushed (opened,
reopened, acknowledged, resolved), never a refreshed reading.
"""

from __future__ import annotations

import logging

import orjson
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

ALL_GROUP = "alerts.all"
PLATFORM_GROUP = "alerts.platform"
MESSAGE_TYPE = "alert.event"

logger = logging.getLogger(__name__)


def tenant_group(tenant_id: int) -> str:
    return f"alerts.tenant.{tenant_id}"


def groups_of(tenant_id: int | None) -> list[str]:
    return [ALL_GROUP, PLATFORM_GROUP if tenant_id is None else tenant_group(tenant_id)]


def _send(event_id: int, state: str, tenant_id: int | None) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    text = orjson.dumps({"type": "alerts.event", "id": event_id, "state": state}).decode()
    try:
        for group in groups_of(tenant_id):
            async_to_sync(layer.group_send)(group, {"type": MESSAGE_TYPE, "text": text})
    except Exception:  # the event stands; a dashboard catches up at its next message
        logger.exception("alert event %s not pushed", event_id)


def publish_on_commit(event_id: int, state: str, tenant_id: int | None) -> None:
    transaction.on_commit(lambda: _send(event_id, state, tenant_id))
