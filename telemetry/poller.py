"""Fetch snapshots from node agents concurrently.

Pure I/O over plain data: no ORM here, so the services can be tested and the
fetch benchmarked on its own. Each process keeps one event loop in a background
thread with one ``agents.client.Pool`` (a lean HTTP/1.1 client), so
keep-alive connections to the agents survive from one cycle to the next (no TCP
handshake per agent per cycle). At most ``concurrency`` requests are in flight
and each agent has its own timeout, retries included, so a slow or broken agent
never delays the others beyond that timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import resource
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from agents import client as agent_client
from agents.gpu_agent import schema

# ?view=portal: only the fields the portal keeps. An agent that does not know the view
# ignores the query and sends the full snapshot, which reads the same here.
SNAPSHOT_PATH = "/v1/snapshot?view=portal"
# Reject absurd answers before parsing them: 8 GPUs fit in a few KiB.
MAX_SNAPSHOT_BYTES = 4 * 1024 * 1024
# The decoder, by a name of its own so bench/ingest's stage timers can count it apart.
_loads = orjson.loads


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
    attempts: int = 1
    # Whether ``snapshot`` already passed the reading schema's check (the poller checks as
    # each answer arrives); services.record_poll_results checks any other before use.
    checked: bool = False

    @property
    def ok(self) -> bool:
        return self.snapshot is not None


def _poll_result(
    target: AgentTarget, response: agent_client.Response, max_gpus: int | None = None
) -> PollResult:
    error = response.error
    if not error:
        if response.status != 200:
            reason = response.body[:200].decode("utf-8", "replace").strip()
            error = f"HTTP {response.status}: {reason}"
        else:
            try:
                # The reading schema's check: types, ranges and lengths of every field the
                # portal keeps; an answer outside them is refused for its node alone.
                snapshot = schema.check_snapshot(_loads(response.body), max_gpus)
            except orjson.JSONDecodeError:
                error = "answer is not valid JSON"
            except schema.SnapshotError as exc:
                error = str(exc)
            else:
                return PollResult(
                    target.node_id, snapshot, "", response.duration_s, response.attempts, True
                )
    return PollResult(target.node_id, None, error, response.duration_s, response.attempts)


def _retry_settings(retries: int | None, backoff: float | None) -> tuple[int, float]:
    if retries is None or backoff is None:
        from django.conf import settings

        if retries is None:
            retries = settings.GPU_POLL_RETRIES
        if backoff is None:
            backoff = settings.GPU_POLL_RETRY_BACKOFF
    return retries, backoff


def max_cards() -> int:
    """GPU_MAX_CARDS_PER_NODE, read when a poll starts: this module imports no Django."""
    from django.conf import settings

    return settings.GPU_MAX_CARDS_PER_NODE


async def fetch_all(
    targets: Iterable[AgentTarget],
    *,
    timeout: float,
    concurrency: int,
    pool: agent_client.Pool | None = None,
    retries: int | None = None,
    backoff: float | None = None,
    max_gpus: int | None = None,
) -> list[PollResult]:
    """One snapshot per target, in order. Retries default to GPU_POLL_RETRIES and
    GPU_POLL_RETRY_BACKOFF, the cap on cards to GPU_MAX_CARDS_PER_NODE; without a pool,
    one is opened and closed for this call."""
    targets = list(targets)
    if not targets:
        return []
    retries, backoff = _retry_settings(retries, backoff)
    if max_gpus is None:
        max_gpus = max_cards()
    if pool is None:
        own = agent_client.Pool()
        try:
            return await fetch_all(
                targets,
                timeout=timeout,
                concurrency=concurrency,
                pool=own,
                retries=retries,
                backoff=backoff,
                max_gpus=max_gpus,
            )
        finally:
            own.close()
    results: list[PollResult | None] = [None] * len(targets)

    def parse(index: int, response: agent_client.Response) -> None:
        # As each answer arrives, so parsing overlaps the wait for the slower agents.
        results[index] = _poll_result(targets[index], response, max_gpus)

    await pool.get_all(
        [(t.url.rstrip("/") + SNAPSHOT_PATH, t.token) for t in targets],
        timeout=timeout,
        concurrency=concurrency,
        retries=retries,
        backoff=backoff,
        max_body=MAX_SNAPSHOT_BYTES,
        on_response=parse,
    )
    return results  # type: ignore[return-value]


def _raise_open_files_limit(wanted: int = 65536) -> None:
    """One keep-alive connection per agent: a worker polling 1,000 agents needs more
    descriptors than the soft limit many systems start processes with (1,024)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY:
            wanted = min(wanted, hard)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):  # not allowed here: the poller works within the limit
        pass


class _LoopThread:
    """One event loop and connection pool per process, reused by every poll of that process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.closed = False
        _raise_open_files_limit()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="agent-poller", daemon=True
        )
        self.thread.start()
        self.pool = agent_client.Pool()
        atexit.register(self.close)

    def close(self) -> None:
        if self.pid != os.getpid() or self.closed:
            return
        self.closed = True

        async def close_pool() -> None:
            self.pool.close()
            await asyncio.sleep(0)  # let the transports finish closing

        # The process is going away either way: a slow close is not worth waiting for.
        with contextlib.suppress(TimeoutError, RuntimeError):
            asyncio.run_coroutine_threadsafe(close_pool(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)

    def run(
        self,
        targets: list[AgentTarget],
        timeout: float,
        concurrency: int,
        retries: int,
        backoff: float,
        max_gpus: int,
    ) -> list[PollResult]:
        coroutine = fetch_all(
            targets,
            timeout=timeout,
            concurrency=concurrency,
            pool=self.pool,
            retries=retries,
            backoff=backoff,
            max_gpus=max_gpus,
        )
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:
            # Interrupted here (a soft time limit, a signal): stop the batch in the loop too,
            # or it goes on beside the next poll with its own `concurrency` requests.
            future.cancel()
            raise


_loop_lock = threading.Lock()
_loop: _LoopThread | None = None


def poll(
    targets: Iterable[AgentTarget],
    *,
    timeout: float,
    concurrency: int,
    retries: int | None = None,
    backoff: float | None = None,
    max_gpus: int | None = None,
) -> list[PollResult]:
    """Synchronous entry point for tasks; safe from any thread of any (forked) process."""
    global _loop
    retries, backoff = _retry_settings(retries, backoff)
    if max_gpus is None:
        max_gpus = max_cards()
    with _loop_lock:
        # A Celery prefork child inherits the parent's object but not its thread.
        if _loop is None or _loop.pid != os.getpid():
            _loop = _LoopThread()
        loop = _loop
    return loop.run(list(targets), timeout, concurrency, retries, backoff, max_gpus)
