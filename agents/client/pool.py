"""A lean HTTP/1.1 client for fanning out to many agents from one event loop.

Why not aiohttp: polling 1,000 agents every few seconds, its per-request machinery
(a task, a response object, a stream reader, header multidicts, timers) cost 350-500 µs
of CPU per request, several times what parsing the answer costs. Here one request is a
few objects and callbacks on a bare ``asyncio.Protocol``:

* one connection per origin (scheme, host, port), kept alive across calls in a
  ``Pool`` that the caller keeps; a connection the server closed while idle is noticed
  (``connection_lost``) and dropped, and an idempotent request (GET, PUT, ...) that a
  reused connection loses before any byte of the answer arrives is sent once more on a
  fresh one (the keep-alive race), which does not count as a retry;
* a GET's bytes are built once per (URL, token) and cached (``get_all``, the poller's
  path); ``send_all`` takes any method with a body (``Request``), and ``send`` is one
  request to one agent from synchronous code (a view, a service);
* at most ``concurrency`` requests in flight, the next one started from the callback of
  the one that finished: no task or semaphore per request (connecting uses a task);
* one timer per request bounds everything about it (connect, retries, answer);
* a refused connection and an HTTP 503 are retried after ``backoff``, ``backoff * 2``,
  ... while the deadline leaves room, and so is a reset or dropped one for an idempotent
  method; nothing else is.

Answers are framed by llhttp through agents/http1.py: Content-Length, chunked encoding or
the connection closing; 1xx interim answers skipped; ``Connection: close`` and HTTP/1.0
end the connection. Anything malformed or over the limits is an error that closes the
connection. No Django here: callers pass the settings in.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from agents.agent_connection import Connection as _Connection
from agents.agent_connection import open_connection
from agents.agent_connection import reason as _reason
from agents.http1 import Origin, Target, prepare, prepare_get
from portal.egress import AddressPolicy, AddressRefused, Resolver

MAX_BODY_BYTES = 4 * 1024 * 1024
RETRY_STATUSES = frozenset({503})
# An idle connection to an origin no longer asked (a removed node) is closed after this.
IDLE_CLOSE_S = 300.0
_PREPARED_MAX = 100_000


@dataclass(slots=True)
class Response:
    """What one request came to: an HTTP answer (``status``, ``body``) or an ``error``."""

    status: int  # 0 when there is no HTTP answer
    body: bytes
    error: str
    duration_s: float
    attempts: int

    @property
    def ok(self) -> bool:
        """An HTTP answer came, whatever its status."""
        return not self.error

    def json(self) -> Any:
        """The body as JSON; raises ``orjson.JSONDecodeError`` (a ValueError) if it is not."""
        return orjson.loads(self.body)


@dataclass(frozen=True, slots=True)
class Request:
    """One request to one agent: ``json`` (when not None) is sent as an application/json
    body, else ``body`` with ``content_type``; ``headers`` are added as given."""

    method: str
    url: str
    token: str = ""
    json: Any = None
    body: bytes = b""
    content_type: str = ""
    headers: Mapping[str, str] | None = None

    def prepare(self) -> Target | str:
        body, content_type = self.body, self.content_type
        if self.json is not None:
            body, content_type = orjson.dumps(self.json), "application/json"
        return prepare(
            self.method, self.url, self.token,
            body=body, content_type=content_type, headers=self.headers,
        )  # fmt: skip


def send(
    request: Request,
    *,
    timeout: float,
    retries: int = 0,
    backoff: float = 0.1,
    max_body: int = MAX_BODY_BYTES,
    ssl_context: ssl.SSLContext | None = None,
) -> Response:
    """One request to one agent from synchronous code (a view, a service, a task).

    It runs in its own short event loop and connection, so it never waits behind a poll
    cycle; async code calls ``Pool.send_all`` instead.
    """

    async def run() -> Response:
        pool = Pool(ssl_context=ssl_context)
        try:
            [response] = await pool.send_all(
                [request], timeout=timeout, concurrency=1, retries=retries, backoff=backoff,
                max_body=max_body,
            )  # fmt: skip
        finally:
            pool.close()
            await asyncio.sleep(0)  # let the transport finish closing inside the loop
        return response

    return asyncio.run(run())


class Pool:
    """Keep-alive connections and prepared requests, owned by one event loop.

    ``ssl_context`` is used for https origins (default: the system's trusted CAs,
    created on first use); ``server_hostname`` is the URL's host. ``address_policy``
    (default: the one set by portal/egress.py's ``set_default_policy``) says which
    addresses it may connect to; it connects only to the addresses it checked.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        address_policy: Callable[[], AddressPolicy | None] | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self._resolver = Resolver(address_policy)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[Origin, list[_Connection]] = {}
        self._connections: set[_Connection] = set()
        self._prepared: dict[tuple[str, str], Target | str] = {}
        self._last_sweep = 0.0
        self.closed = False

    @property
    def ssl_context(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context

    async def get_all(
        self,
        requests: Sequence[tuple[str, str]],
        *,
        timeout: float,
        concurrency: int,
        retries: int = 0,
        backoff: float = 0.1,
        max_body: int = MAX_BODY_BYTES,
        on_response: Callable[[int, Response], None] | None = None,
    ) -> list[Response]:
        """GET every (url, bearer token); the answers in the same order.

        ``on_response(index, response)`` is called as each one is final, in the loop;
        what it raises is raised here once all requests are done.
        """
        targets = [self._target(url, token) for url, token in requests]
        return await self._run(
            targets, timeout, concurrency, retries, backoff, max_body, on_response
        )

    async def send_all(
        self,
        requests: Sequence[Request],
        *,
        timeout: float,
        concurrency: int,
        retries: int = 0,
        backoff: float = 0.1,
        max_body: int = MAX_BODY_BYTES,
        on_response: Callable[[int, Response], None] | None = None,
    ) -> list[Response]:
        """As ``get_all``, for requests of any method; their bytes are built per call.

        A malformed method or header raises ValueError before anything is sent.
        """
        targets = [request.prepare() for request in requests]
        return await self._run(
            targets, timeout, concurrency, retries, backoff, max_body, on_response
        )

    async def _run(
        self,
        targets: list[Target | str],
        timeout: float,
        concurrency: int,
        retries: int,
        backoff: float,
        max_body: int,
        on_response: Callable[[int, Response], None] | None,
    ) -> list[Response]:
        loop = asyncio.get_running_loop()
        if self.closed:
            raise RuntimeError("the pool is closed")
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("a Pool belongs to the event loop that first used it")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not targets:
            return []
        self._sweep(loop.time())
        batch = _Batch(self, loop, targets, timeout, concurrency, retries, backoff, max_body)
        batch.on_response = on_response
        return await batch.run()

    def close(self) -> None:
        """Close every connection (from the pool's loop thread)."""
        self.closed = True
        for connection in list(self._connections):
            connection.close()
        self._connections.clear()
        self._idle.clear()

    # Connections: the contract agents/agent_connection.py's connections hold the pool to.

    def opened(self, connection: _Connection) -> None:
        self._connections.add(connection)

    def _target(self, url: str, token: str) -> Target | str:
        key = (url, token)
        target = self._prepared.get(key)
        if target is None:
            if len(self._prepared) >= _PREPARED_MAX:
                self._prepared.clear()
            target = self._prepared[key] = prepare_get(url, token)
        return target

    def _checkout(self, origin: Origin) -> _Connection | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
        return None

    def checkin(self, connection: _Connection) -> None:
        if self.closed:
            connection.close()
            return
        connection.idle_since = self._loop.time() if self._loop else 0.0
        idle = self._idle.get(connection.origin)
        if idle is None:
            self._idle[connection.origin] = [connection]
        else:
            idle.append(connection)

    def forget(self, connection: _Connection) -> None:
        self._connections.discard(connection)
        idle = self._idle.get(connection.origin)
        if idle and connection in idle:
            idle.remove(connection)
            if not idle:
                del self._idle[connection.origin]

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < 60:
            return
        self._last_sweep = now
        for idle in list(self._idle.values()):
            for connection in list(idle):
                if now - connection.idle_since > IDLE_CLOSE_S:
                    connection.close()


class _Exchange:
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
        self.connection: _Connection | None = None
        self.task: asyncio.Task | None = None
        self.retry_handle: asyncio.TimerHandle | None = None


class _Batch:
    """One ``get_all`` or ``send_all`` call: starts requests as slots free up, collects
    the answers."""

    def __init__(
        self,
        pool: Pool,
        loop: asyncio.AbstractEventLoop,
        targets: list[Target | str],
        timeout: float,
        concurrency: int,
        retries: int,
        backoff: float,
        max_body: int,
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
        self.on_response: Callable[[int, Response], None] | None = None
        self.callback_error: Exception | None = None
        self.next = 0
        self.in_flight: dict[int, _Exchange] = {}
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
        exchange = _Exchange(index, target, now, now + self.timeout)
        self.in_flight[index] = exchange
        exchange.timer = self.loop.call_at(exchange.deadline, self._expire, exchange)
        self._attempt(exchange)

    def _attempt(self, exchange: _Exchange, *, fresh: bool = False) -> None:
        exchange.retry_handle = None
        if not fresh:
            exchange.attempts += 1
            connection = self.pool._checkout(exchange.target.origin)
            if connection is not None:
                connection.send(self, exchange)
                return
        exchange.task = self.loop.create_task(self._connect(exchange))

    async def _connect(self, exchange: _Exchange) -> None:
        scheme, host, port = exchange.target.origin
        tls = scheme == "https"
        pool = self.pool
        try:
            addresses = await pool._resolver.addresses(host, port)
            context = pool.ssl_context if tls else None
            connection = await open_connection(pool, exchange.target.origin, addresses, context)
        except AddressRefused as exc:
            error = f"not connecting to {exchange.target.address}: {exc}"
            self.failed(exchange, error, retry=False)
            return
        except ssl.SSLError as exc:
            error = f"TLS error with {exchange.target.address}: {exc.reason or exc}"
            self.failed(exchange, error, retry=False)
            return
        except socket.gaierror as exc:
            error = f"cannot resolve {host}: {_reason(exc)}"
            self.failed(exchange, error, retry=False)
            return
        except OSError as exc:
            error = f"cannot connect to {exchange.target.address}: {_reason(exc)}"
            self.failed(exchange, error, retry=True)
            return
        except UnicodeError:  # the IDNA codec: an empty label or one over 63 characters
            self.failed(exchange, f"cannot resolve {host}: invalid host name", retry=False)
            return
        except Exception as exc:  # never leave the exchange to its timer
            error = f"cannot connect to {exchange.target.address}: {_reason(exc)}"
            self.failed(exchange, error, retry=False)
            return
        exchange.task = None
        if exchange.done:  # expired as the connection came up: keep it for next time
            pool.checkin(connection)
            return
        connection.send(self, exchange)

    def _retry_later(self, exchange: _Exchange) -> bool:
        if exchange.attempts > self.retries:
            return False
        at = self.loop.time() + self.backoff * 2 ** (exchange.attempts - 1)
        if at >= exchange.deadline:
            return False
        exchange.retry_handle = self.loop.call_at(at, self._attempt, exchange)
        return True

    # Outcomes, called by connections (agent_connection.Batch) and timers.

    def answered(self, exchange: _Exchange, status: int, body: bytes) -> None:
        exchange.connection = None
        if status in RETRY_STATUSES and self._retry_later(exchange):
            return
        self._finish(exchange, status, body, "")

    def failed(self, exchange: _Exchange, error: str, *, retry: bool, stale: bool = False) -> None:
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

    def _expire(self, exchange: _Exchange) -> None:
        exchange.timer = None
        if not exchange.done:
            self._abandon(exchange)
            self._finish(exchange, 0, b"", self.timeout_error)

    def _abandon(self, exchange: _Exchange) -> None:
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

    def _finish(self, exchange: _Exchange, status: int, body: bytes, error: str) -> None:
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
