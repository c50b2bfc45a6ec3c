"""One Redis client per process for the data paths that bypass Django's cache API.

Production points it at REDIS_URL. The embedded default (no REDIS_URL) gets an
in-process server that speaks the same commands, Lua included (fakeredis), so the
latest readings, watched nodes and the sample buffer have one implementation.
"""

from __future__ import annotations

import os
import time

import redis
from django.conf import settings

_client: tuple[int, redis.Redis] | None = None


def client() -> redis.Redis:
    """The shared client: Redis at REDIS_URL, else the process's own in-process server."""
    global _client
    # A forked Celery child must not share its parent's sockets (nor, embedded, its data:
    # the embedded default is one process, so a fork only ever belongs to a test).
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), _connect())
    return _client[1]


def _connect() -> redis.Redis:
    if settings.REDIS_URL:
        return redis.Redis.from_url(settings.REDIS_URL)
    import fakeredis  # only the embedded default needs it loaded

    # A server of our own, not fakeredis's shared default: nothing else in the process
    # (a test's fake, say) reads or flushes the portal's keys.
    return fakeredis.FakeRedis(server=fakeredis.FakeServer())


def key(*parts: object) -> str:
    """Keys under the deployment's prefix, so several portals can share one Redis."""
    return ":".join([settings.CACHES["default"].get("KEY_PREFIX", "gpuportal"), *map(str, parts)])


def watch(key_name: str, member: int, ttl_s: float) -> None:
    """Mark ``member`` watched for ``ttl_s`` in the sorted set ``key_name``, scored by
    expiry: one key for all members, so a check is one command, not one per member."""
    now = time.time()
    pipe = client().pipeline(transaction=False)
    pipe.zadd(key_name, {member: now + ttl_s})
    pipe.zremrangebyscore(key_name, "-inf", now)  # lapsed watchers
    pipe.expire(key_name, int(ttl_s))
    pipe.execute()


def watched(key_name: str) -> set[int]:
    """The members of ``key_name`` (see ``watch``) whose watch has not lapsed."""
    return watched_of(client().zrangebyscore(key_name, time.time(), "+inf"))


def read_watched(pipe, key_name: str) -> None:
    """``watched`` on a pipeline; ``watched_of`` reads its answer."""
    pipe.zrangebyscore(key_name, time.time(), "+inf")


def watched_of(members) -> set[int]:
    return {int(m) for m in members}
