"""The agent client's pool: keep-alive connections and prepared requests, owned by one
event loop, for fanning out to many agents at once; ``send`` for one request from
synchronous code.

Why not aiohttp: polling 1,000 agents every few seconds, its per-request machinery
(a task, a response object, a stream reader, header multidicts, timers) cost 350-500 µs
of CPU per request, several times what parsing the answer costs. Here one request is a
few objects and callbacks on a bare ``asyncio.Protocol`` (``connection.py``):

* one connection per origin (scheme, host, port), kept alive across calls in a
  ``Pool`` that the caller keeps; a connection the server closed while idle is noticed
  (``connection_lost``) and dropped;
* a GET's bytes are built once per (URL, token) and cached (``get_all``, the poller's
  path); ``send_all`` takes any method with a body (``Request``), and ``send`` is one
  request to one agent from synchronous code (a view, a service);
* each call is a ``batch.Batch``: concurrency, timers, retries and the keep-alive race.

Answers are framed by llhttp through ``framing.py``: Content-Length, chunked encoding or
the connection closing; 1xx interim answers skipped; ``Connection: close`` and HTTP/1.0
end the connection. Anything malformed or over the limits is an error that closes the
connection. No Django here: callers pass the settings in.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence

from agents.client.batch import Batch
from agents.client.connection import open_connection
from agents.client.contract import Link
from agents.client.framing import Origin, Target, prepare_get
from agents.client.messages import Request, Response
from portal.egress import AddressPolicy, Resolver

MAX_BODY_BYTES = 4 * 1024 * 1024
# An idle connection to an origin no longer asked (a removed node) is closed after this.
IDLE_CLOSE_S = 300.0
_PREPARED_MAX = 100_000


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
        self._idle: dict[Origin, list[Link]] = {}
        self._connections: set[Link] = set()
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
        batch = Batch(
            self, loop, targets, timeout, concurrency, retries, backoff, max_body, on_response
        )
        return await batch.run()

    def close(self) -> None:
        """Close every connection (from the pool's loop thread)."""
        self.closed = True
        for connection in list(self._connections):
            connection.close()
        self._connections.clear()
        self._idle.clear()

    def _target(self, url: str, token: str) -> Target | str:
        key = (url, token)
        target = self._prepared.get(key)
        if target is None:
            if len(self._prepared) >= _PREPARED_MAX:
                self._prepared.clear()
            target = self._prepared[key] = prepare_get(url, token)
        return target

    # contract.LinkOwner and contract.Links: what connections and batches ask of the pool.

    def opened(self, connection: Link) -> None:
        self._connections.add(connection)

    def checkout(self, origin: Origin) -> Link | None:
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
        return None

    async def connect(self, origin: Origin) -> Link:
        scheme, host, port = origin
        addresses = await self._resolver.addresses(host, port)
        context = self.ssl_context if scheme == "https" else None
        return await open_connection(self, origin, addresses, context)

    def checkin(self, connection: Link) -> None:
        if self.closed:
            connection.close()
            return
        connection.idle_since = self._loop.time() if self._loop else 0.0
        idle = self._idle.get(connection.origin)
        if idle is None:
            self._idle[connection.origin] = [connection]
        else:
            idle.append(connection)

    def forget(self, connection: Link) -> None:
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
