"""Fetch snapshots from node agents concurrently.

Pure I/O over plain data: no ORM here, so the services can be tested and the
fetch benchmarked on its own. Each process keeps one event loop in a background
thread with one long-lived aiohttp session, so keep-alive connections to the
agents survive from one cycle to the next (no TCP handshake per agent per
cycle). A semaphore bounds concurrency and each agent has its own timeout, so a
slow or broken agent never delays the others beyond that timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

SNAPSHOT_PATH = "/v1/snapshot"
# Reject absurd answers before parsing them: 8 GPUs fit in a few KiB.
MAX_SNAPSHOT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class AgentTarget:
    node_id: int
    url: str
    token: str


@dataclass(frozen=True, slots=True)
class PollResult:
    node_id: int
    snapshot: dict[str, Any] | None
    error: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.snapshot is not None


class SnapshotError(ValueError):
    """The agent answered, but not with a snapshot we can use."""


def validate_snapshot(data: Any) -> dict[str, Any]:
    """Check the shape the services rely on; anything else is the agent's fault."""
    if not isinstance(data, dict):
        raise SnapshotError("snapshot is not a JSON object")
    gpus = data.get("gpus")
    if not isinstance(gpus, list):
        raise SnapshotError("snapshot has no 'gpus' list")
    for gpu in gpus:
        if not isinstance(gpu, dict):
            raise SnapshotError("a GPU entry is not an object")
        if not isinstance(gpu.get("uuid"), str) or not gpu["uuid"]:
            raise SnapshotError("a GPU entry has no 'uuid'")
        if not isinstance(gpu.get("index"), int) or gpu["index"] < 0:
            raise SnapshotError(f"GPU {gpu['uuid']} has no valid 'index'")
    return data


async def _read_body(response: aiohttp.ClientResponse) -> bytes:
    """The whole body, refusing one larger than MAX_SNAPSHOT_BYTES before reading it all.

    (``content.read(n)`` alone returns what has arrived so far, which for a body split
    over several TCP segments is only its beginning.)
    """
    if (response.content_length or 0) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError("snapshot larger than 4 MiB")
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(256 * 1024):
        size += len(chunk)
        if size > MAX_SNAPSHOT_BYTES:
            raise SnapshotError("snapshot larger than 4 MiB")
        chunks.append(chunk)
    return b"".join(chunks)


async def _fetch_one(
    session: aiohttp.ClientSession,
    semaphore: asyncio.Semaphore,
    target: AgentTarget,
    timeout: aiohttp.ClientTimeout,
) -> PollResult:
    url = target.url.rstrip("/") + SNAPSHOT_PATH
    headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
    async with semaphore:
        started = time.perf_counter()
        try:
            async with session.get(url, headers=headers, timeout=timeout) as response:
                if response.status != 200:
                    body = (await response.content.read(200)).decode("utf-8", "replace")
                    raise SnapshotError(f"HTTP {response.status}: {body.strip()}")
                raw = await _read_body(response)
            snapshot = validate_snapshot(orjson.loads(raw))
            return PollResult(target.node_id, snapshot, "", time.perf_counter() - started)
        except TimeoutError:
            error = f"timed out after {timeout.total:g} s"
        except orjson.JSONDecodeError:
            error = "answer is not valid JSON"
        except (aiohttp.ClientError, SnapshotError) as exc:
            error = str(exc) or type(exc).__name__
        return PollResult(target.node_id, None, error, time.perf_counter() - started)


async def fetch_all(
    targets: Iterable[AgentTarget],
    *,
    timeout: float,
    concurrency: int,
    session: aiohttp.ClientSession | None = None,
) -> list[PollResult]:
    targets = list(targets)
    if not targets:
        return []
    if session is None:
        async with _new_session(concurrency) as own:
            return await fetch_all(targets, timeout=timeout, concurrency=concurrency, session=own)
    semaphore = asyncio.Semaphore(concurrency)
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    return list(
        await asyncio.gather(*(_fetch_one(session, semaphore, t, client_timeout) for t in targets))
    )


def _new_session(concurrency: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=concurrency, ttl_dns_cache=300, keepalive_timeout=60)
    return aiohttp.ClientSession(connector=connector, raise_for_status=False)


class _LoopThread:
    """One event loop and session per process, reused by every poll of that process."""

    def __init__(self, concurrency: int) -> None:
        self.pid = os.getpid()
        self.closed = False
        self.concurrency = concurrency
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="agent-poller", daemon=True
        )
        self.thread.start()
        self.session = asyncio.run_coroutine_threadsafe(self._open(), self.loop).result()
        atexit.register(self.close)

    async def _open(self) -> aiohttp.ClientSession:
        return _new_session(self.concurrency)

    def close(self) -> None:
        if self.pid != os.getpid() or self.closed:
            return
        self.closed = True
        # The process is going away either way: a slow close is not worth waiting for.
        with contextlib.suppress(TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(self.session.close(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)

    def run(self, targets: list[AgentTarget], timeout: float) -> list[PollResult]:
        coroutine = fetch_all(
            targets, timeout=timeout, concurrency=self.concurrency, session=self.session
        )
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


_loop_lock = threading.Lock()
_loop: _LoopThread | None = None


def poll(targets: Iterable[AgentTarget], *, timeout: float, concurrency: int) -> list[PollResult]:
    """Synchronous entry point for tasks; safe from any thread of any (forked) process."""
    global _loop
    with _loop_lock:
        # A Celery prefork child inherits the parent's object but not its thread.
        if _loop is None or _loop.pid != os.getpid() or _loop.concurrency != concurrency:
            if _loop is not None:
                _loop.close()
            _loop = _LoopThread(concurrency)
        loop = _loop
    return loop.run(list(targets), timeout)
