"""One keep-alive connection of the agent client to one agent.

The ``asyncio.Protocol`` side of the client: it writes a prepared request, feeds the
bytes that come back to the llhttp reader (``framing.ResponseReader``) and hands the
answer, or what went wrong, to the batch that sent it; the pool decides what happens
next. It knows the pool, the batch and the exchange only by ``contract``'s Protocols
(``LinkOwner``, ``Sender``, ``InFlight``) and is itself a ``contract.Link``.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import Any

from agents.client.contract import E, InFlight, LinkOwner, Sender
from agents.client.framing import HTTPError, Origin, ResponseReader


def reason(exc: BaseException) -> str:
    """An OS or TLS error in words, for a Response's ``error``."""
    if isinstance(exc, ssl.SSLError):  # its errno is OpenSSL's error kind, not an OS errno
        return f"TLS error: {exc.reason or exc.strerror or exc}"
    errno = getattr(exc, "errno", None)
    if isinstance(errno, int) and errno > 0:
        return os.strerror(errno)
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


async def open_connection(
    pool: LinkOwner, origin: Origin, addresses: list[str], ssl_context: ssl.SSLContext | None
) -> Connection:
    """A connection to the first of ``addresses`` (checked ones, portal/egress.py)
    that accepts, in order; TLS checks the certificate against the URL's host."""
    loop = asyncio.get_running_loop()
    _scheme, host, port = origin
    for position, address in enumerate(addresses):
        try:
            _, connection = await loop.create_connection(
                lambda: Connection(pool, origin), address, port,
                ssl=ssl_context, server_hostname=host if ssl_context else None,
            )  # fmt: skip
            return connection
        except ssl.SSLError:
            raise
        except OSError:
            if position == len(addresses) - 1:
                raise
    raise OSError("no address to connect to")  # resolving never answers an empty list


class Connection(asyncio.Protocol):
    """One connection to one origin, carrying one request at a time."""

    def __init__(self, pool: LinkOwner, origin: Origin) -> None:
        self.pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.answers = 0
        self.idle_since = 0.0
        self.batch: Sender[Any] | None = None
        self.exchange: InFlight | None = None
        self.received = False
        self.reader = ResponseReader()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.pool.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        batch, exchange = self.batch, self.exchange
        if batch is None or exchange is None:
            return
        self._detach()
        address = exchange.target.address
        # Sent again only if doing it twice is harmless: the server may have acted on it.
        again = exchange.target.idempotent
        body = self.reader.at_close() if exc is None else None
        if body is not None:
            batch.answered(exchange, self.reader.status, body)
        elif not self.received and self.answers:
            error = f"connection to {address} closed before the answer"
            batch.failed(exchange, error, retry=again, stale=again)
        elif exc is not None:
            batch.failed(exchange, f"connection to {address} lost: {reason(exc)}", retry=again)
        else:
            error = f"connection closed by {address} before the answer was complete"
            batch.failed(exchange, error, retry=again)

    def data_received(self, data: bytes) -> None:
        batch, exchange = self.batch, self.exchange
        if batch is None or exchange is None:
            # Bytes nobody asked for (a 408 on an idle connection, or garbage): the
            # connection's state is unknown, so it is not reused.
            self.abandon()
            return
        self.received = True
        try:
            body = self.reader.feed(data)
        except HTTPError as exc:
            self.abandon()
            batch.failed(exchange, f"{exc} (from {exchange.target.address})", retry=False)
            return
        if body is None:
            return
        self._detach()
        self.answers += 1
        if self.reader.keep_alive and not self.reader.leftover:
            self.pool.checkin(self)
        else:  # told to close, or sent more than it framed: not reusable
            self.close()
        batch.answered(exchange, self.reader.status, body)

    # contract.Link: used by the pool and batches.

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def send(self, batch: Sender[E], exchange: E) -> None:
        self.batch = batch
        self.exchange = exchange
        exchange.connection = self
        self.received = False
        self.reader.start(batch.max_body)
        assert self.transport is not None
        self.transport.write(exchange.target.request)

    def abandon(self) -> None:
        """Drop the connection and whatever it was carrying (no callback)."""
        self.close(abort=True)

    def close(self, abort: bool = False) -> None:
        self._detach()
        self.closed = True
        self.pool.forget(self)
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def _detach(self) -> None:
        if self.exchange is not None:
            self.exchange.connection = None
        self.batch = None
        self.exchange = None
