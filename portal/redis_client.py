"""One Redis client per process for the data paths that bypass Django's cache API."""

from __future__ import annotations

import os

import redis
from django.conf import settings

_client: tuple[int, redis.Redis] | None = None


def client() -> redis.Redis | None:
    """The shared client, or None on the embedded default (no Redis configured)."""
    global _client
    if not settings.REDIS_URL:
        return None
    # A forked Celery child must not share its parent's sockets.
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), redis.Redis.from_url(settings.REDIS_URL))
    return _client[1]


def key(*parts: object) -> str:
    """Keys under the deployment's prefix, so several portals can share one Redis."""
    return ":".join([settings.CACHES["default"].get("KEY_PREFIX", "gpuportal"), *map(str, parts)])
