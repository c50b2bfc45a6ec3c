"""One call of ``Pool.get_all`` or ``Pool.send_all``: its requests, each through its
attempts, with at most ``concurrency`` in flight, the next one started from the callback
of the one that finished (no task or semaphore per request; connecting uses a task).

One timer per request bounds everything about it (connect, retries, answer). A refused
connection and an HTTP 503 are retried after ``backoff``, ``backoff * 2``, ... while the
deadline leaves room, and so is a reset or dropped one for an idempotent method; an
idempotent request that a reused connection loses before any byte of the answer is sent
once more on a fresh one (the keep-alive race), which is no retry. A batch knows its pool
as ``contract.Links`` and is the ``contract.Sender`` of the connections it sends on.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable

from agents.client.connection import reason
from agents.client.contract import Link, Links
from agents.client.framing import Target
from agents.client.messages import Response
from portal.egress import AddressRefused

RETRY_STATUSES = frozenset({503})


class Exchange:
    """One target's request, through its attempts, until it has a final Response."""

    __slots__ = (
        "attempts",
        "connection",
        "deadline",
        "done",
        "index",
        "resent",
        "retry_handle",
        "started",
        "target",
        "task",
        "timer",
    )  # fmt: skip

    def __init__(self, index: int, target: Target, started: float, deadline: float) -> None:
        self.index = index
        self.target = target
        self.started = started
        self.deadline = deadline
        self.attempts = 0
        self.resent = False
        self.done = False
        self.timer: asyncio.TimerHandle | None = None
        self.connection: Link | None = None
        self.task: asyncio.Task | None = None
        self.retry_handle: asyncio.TimerHandle | None = None


class Batch:
    """One ``get_all`` or ``send_all`` call: starts requests as slots free up, collects
    the answers."""

    def __init__(
        self,
        pool: Links,
        loop: asyncio.AbstractEventLoop,
        targets: list[Target | str],
        timeout: float,
        concurrency: int,
        retries: int,
        backoff: float,
        max_body: int,
        on_response: Callable[[int, Response], None] | None = None,
    ) -> None:
        self.pool = pool
        self.loop = loop
        self.targets = targets
        self.timeout = timeout
        self.timeout_error = f"timed out after {timeout:g} s"
        self.concurrency = concurrency
        self.retries = retries
        self.backoff = backoff
        self.max_body = max_body
        self.results: list[Response | None] = [None] * len(targets)
        self.on_response = on_response
        self.callback_error: Exception | None = None
        self.next = 0
        self.in_flight: dict[int, Exchange] = {}
        self.filling = False
        self.future: asyncio.Future[None] = loop.create_future()

    async def run(self) -> list[Response]:
        self._fill()
        try:
            await self.future
        except asyncio.CancelledError:
            for exchange in list(self.in_flight.values()):
                self._abandon(exchange)
            raise
        if self.callback_error is not None:
            raise self.callback_error
        return self.results  # type: ignore[return-value]

    def _fill(self) -> None:
        # Requests that fail at once (a bad URL) finish inside _start: the loop here,
        # not recursion, moves on to the next ones.
        if self.filling:
            return
        self.filling = True
        try:
            while self.next < len(self.targets) and len(self.in_flight) < self.concurrency:
                index = self.next
                self.next += 1
                self._start(index)
        finally:
            self.filling = False
        if not self.in_flight and self.next >= len(self.targets) and not self.future.done():
            self.future.set_result(None)

    def _start(self, index: int) -> None:
        target = self.targets[index]
        now = self.loop.time()
        if isinstance(target, str):
            self._record(index, Response(0, b"", target, 0.0, 0))
            return
        exchange = Exchange(index, target, now, now + self.timeout)
        self.in_flight[index] = exchange
        exchange.timer = self.loop.call_at(exchange.deadline, self._expire, exchange)
        self._attempt(exchange)

    def _attempt(self, exchange: Exchange, *, fresh: bool = False) -> None:
        exchange.retry_handle = None
        if not fresh:
            exchange.attempts += 1
            connection = self.pool.checkout(exchange.target.origin)
            if connection is not None:
                connection.send(self, exchange)
                return
        exchange.task = self.loop.create_task(self._connect(exchange))

    async def _connect(self, exchange: Exchange) -> None:
        host = exchange.target.origin[1]
        try:
            connection = await self.pool.connect(exchange.target.origin)
        except AddressRefused as exc:
            error = f"not connecting to {exchange.target.address}: {exc}"
            self.failed(exchange, error, retry=False)
            return
        except ssl.SSLError as exc:
            error = f"TLS error with {exchange.target.address}: {exc.reason or exc}"
            self.failed(exchange, error, retry=False)
            return
        except socket.gaierror as exc:
            error = f"cannot resolve {host}: {reason(exc)}"
            self.failed(exchange, error, retry=False)
            return
        except OSError as exc:
            error = f"cannot connect to {exchange.target.address}: {reason(exc)}"
            self.failed(exchange, error, retry=True)
            return
        except UnicodeError:  # the IDNA codec: an empty label or one over 63 characters
            self.failed(exchange, f"cannot resolve {host}: invalid host name", retry=False)
            return
        except Exception as exc:  # never leave the exchange to its timer
            error = f"cannot connect to {exchange.target.address}: {reason(exc)}"
            self.failed(exchange, error, retry=False)
            return
        exchange.task = None
        if exchange.done:  # expired as the connection came up: keep it for next time
            self.pool.checkin(connection)
            return
        connection.send(self, exchange)

    def _retry_later(self, exchange: Exchange) -> bool:
        if exchange.attempts > self.retries:
            return False
        at = self.loop.time() + self.backoff * 2 ** (exchange.attempts - 1)
        if at >= exchange.deadline:
            return False
        exchange.retry_handle = self.loop.call_at(at, self._attempt, exchange)
        return True

    # contract.Sender: outcomes, called by connections (and by timers).

    def answered(self, exchange: Exchange, status: int, body: bytes) -> None:
        exchange.connection = None
        if status in RETRY_STATUSES and self._retry_later(exchange):
            return
        self._finish(exchange, status, body, "")

    def failed(self, exchange: Exchange, error: str, *, retry: bool, stale: bool = False) -> None:
        exchange.connection = None
        exchange.task = None
        if exchange.done:
            return
        if stale and not exchange.resent:
            exchange.resent = True
            self._attempt(exchange, fresh=True)
            return
        if retry and self._retry_later(exchange):
            return
        self._finish(exchange, 0, b"", error)

    def _expire(self, exchange: Exchange) -> None:
        exchange.timer = None
        if not exchange.done:
            self._abandon(exchange)
            self._finish(exchange, 0, b"", self.timeout_error)

    def _abandon(self, exchange: Exchange) -> None:
        if exchange.connection is not None:
            exchange.connection.abandon()  # it may be mid-answer: the connection is lost
            exchange.connection = None
        if exchange.task is not None:
            exchange.task.cancel()
            exchange.task = None
        if exchange.retry_handle is not None:
            exchange.retry_handle.cancel()
            exchange.retry_handle = None
        if exchange.timer is not None:
            exchange.timer.cancel()
            exchange.timer = None

    def _finish(self, exchange: Exchange, status: int, body: bytes, error: str) -> None:
        exchange.done = True
        if exchange.timer is not None:
            exchange.timer.cancel()
        duration = self.loop.time() - exchange.started
        del self.in_flight[exchange.index]
        self._record(exchange.index, Response(status, body, error, duration, exchange.attempts))
        self._fill()

    def _record(self, index: int, response: Response) -> None:
        self.results[index] = response
        if self.on_response is not None:
            try:
                self.on_response(index, response)
            except Exception as exc:  # raised from get_all once the others are done
                if self.callback_error is None:
                    self.callback_error = exc
