"""The agent's HTTP endpoints: an asyncio protocol, one per client connection.

``/v1/snapshot`` (bearer token) is what the portal polls, whole or as the compact
``?view=portal`` (``snapshot_views.py``); ``/v1/desired-state`` (bearer token, GET and
PUT) is where it sends this node's slices; ``/metrics`` is for a Prometheus that already
scrapes dcgm-exporter (a token only with ``--metrics-auth``); ``/healthz`` is for
liveness probes and tells nothing else.

The one server of both modes (``loop.py`` runs it): a real node's ``Collector`` and
each of the simulator's ``LazyNode``s are a ``ServedNode``. No thread per connection:
a thousand listening ports and their keep-alive connections cost one thread and a few
KB each. Handlers only copy bytes the node prepared, so they answer in microseconds
whatever the card is doing. Only what the portal, Prometheus and curl send is parsed:
a request line, headers ending in a blank line, and a body only for
PUT /v1/desired-state (Content-Length; no chunked encoding, which gets 411). The
standard library only: the agent installs alone on a GPU node.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import urlsplit

from agents.gpu_agent import __version__
from agents.gpu_agent.desired_http import DESIRED_PATH, DesiredNode, body_length, put_desired_state
from agents.gpu_agent.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from agents.gpu_agent.snapshot_views import UnknownView, requested_view

log = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json"
# /healthz turns 503 when the data is older than this many collection periods.
STALE_AFTER_INTERVALS = 5
# http.server's limits: 64 KiB per line, 100 headers; a bigger head is not a portal.
MAX_HEAD_BYTES = 64 * 1024 + 100 * 1024
IDLE_TIMEOUT_S = 60.0  # idle keep-alive connections close, so clients that vanish cost nothing
_SERVER = f"gpu-agent/{__version__}"
_UNAUTHORIZED = (
    401,
    {"error": "missing or invalid bearer token"},
    {"WWW-Authenticate": 'Bearer realm="gpu-agent"'},
)


class ServedNode(DesiredNode, Protocol):
    """What the server reads from a node: bytes prepared by its collection, never more."""

    interval_s: float

    def snapshot_json(self, view: str) -> bytes | None: ...

    def metrics_text(self) -> bytes | None: ...

    def last_collect_age_s(self) -> float | None: ...

    def invalidate(self) -> None:
        """A new desired state was stored: the next snapshot should attribute it."""


class Site:
    """What one listening port serves: a node and its access rules."""

    def __init__(self, node: ServedNode, token: str | None, metrics_auth: bool) -> None:
        self.node = node
        # None means --no-auth: the snapshot is served to anyone who can reach the port.
        self.token = token.encode() if token is not None else None
        # Off by default: Prometheus scrape configs for dcgm-exporter carry no token.
        self.metrics_auth = metrics_auth


class _Headers(dict[str, str]):
    """Header names are case-insensitive; keys are stored lower-cased."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)


# HTTPStatus(status).phrase is an enum lookup per response; a dict is a tenth of that.
_REASONS = {status.value: status.phrase for status in HTTPStatus}
_date_cache: tuple[int, str] = (0, "")


def _http_date() -> str:
    # Formatting a date costs more than the rest of a response header; once a second will do.
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


# Where every connection receives into. A plain Protocol gets each read as a new bytes
# object that asyncio sizes for 256 KiB: an mmap, mremap and munmap per request (seen
# with strace), a tenth of a fresh snapshot's CPU. One buffer serves all connections:
# the loop has one thread, and each read is copied out before the next one starts.
_RECV_BUFFER = memoryview(bytearray(64 * 1024))


class AgentProtocol(asyncio.BufferedProtocol):
    """One client connection to one node; requests are answered in arrival order."""

    def __init__(self, site: Site, connections: set[AgentProtocol]) -> None:
        self.site = site
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.last_active = time.monotonic()
        self.closing = False
        # A PUT waiting for its body: (headers, Content-Length).
        self._awaiting: tuple[_Headers, int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.closing = True

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        return _RECV_BUFFER

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_RECV_BUFFER[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        self.last_active = time.monotonic()
        self.buffer += data
        try:
            self._process()
        except Exception:
            # A bug here must cost one connection, never the loop serving every node.
            log.exception("error serving a request")
            self.close()

    def _process(self) -> None:
        while not self.closing:
            if self._awaiting is not None:
                headers, length = self._awaiting
                if len(self.buffer) < length:
                    return
                body = bytes(self.buffer[:length])
                del self.buffer[:length]
                self._awaiting = None
                self._finish_put(headers, body)
                continue
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buffer) > MAX_HEAD_BYTES:
                    self._respond("", 431, {"error": "request header too large"}, close=True)
                return
            head = self.buffer[:end].decode("latin-1")
            del self.buffer[: end + 4]
            self._request(head)

    def _request(self, head: str) -> None:
        request_line, *lines = head.split("\r\n")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            self._respond("", 400, {"error": "bad request line"}, close=True)
            return
        method, target, version = parts
        headers = _Headers()
        for line in lines:
            name, sep, value = line.partition(":")
            if not sep:
                self._respond(method, 400, {"error": "bad header line"}, close=True)
                return
            headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        # HTTP/1.1 keeps the connection unless told otherwise; 1.0 only when asked.
        close = connection == "close" or (version == "HTTP/1.0" and connection != "keep-alive")
        split = urlsplit(target)
        path, query = split.path, split.query
        if method == "GET":
            # A body on a GET is never read, so the next request could not be found.
            close = close or headers.get("content-length", "0") not in ("", "0")
            self._get(path, query, headers, close)
        elif method == "PUT" and path == DESIRED_PATH:
            self._start_put(headers, close)
        elif method in ("PUT", "POST", "PATCH", "DELETE", "OPTIONS", "HEAD"):
            allow = "GET, PUT" if path == DESIRED_PATH else "GET"
            error = {"error": f"method {method} not allowed"}
            # The body (if any) is not read, so the connection cannot be reused.
            self._respond(method, 405, error, {"Allow": allow}, close=True)
        else:
            self._respond(method, 501, {"error": f"unsupported method {method!r}"}, close=True)

    def _authorized(self, headers: _Headers) -> bool:
        token = self.site.token
        if token is None:
            return True
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(credentials.strip().encode("utf-8", "replace"), token)

    def _get(self, path: str, query: str, headers: _Headers, close: bool) -> None:
        node = self.site.node
        if path == "/v1/snapshot":
            if not self._authorized(headers):
                self._respond("GET", *_UNAUTHORIZED, close=close)
                return
            try:
                view = requested_view(query)
            except UnknownView as exc:
                self._respond("GET", 400, {"error": str(exc)}, close=close)
                return
            body = node.snapshot_json(view)
            if body is None:
                error = {"error": "no collection has completed yet"}
                self._respond("GET", 503, error, {"Retry-After": "1"}, close=close)
                return
            self._send(200, body, JSON_CONTENT_TYPE, None, close)
        elif path == "/metrics":
            if self.site.metrics_auth and not self._authorized(headers):
                self._respond("GET", *_UNAUTHORIZED, close=close)
                return
            text = node.metrics_text()
            if text is None:
                text = b"# no collection has completed yet\n"
                self._send(503, text, METRICS_CONTENT_TYPE, None, close)
                return
            self._send(200, text, METRICS_CONTENT_TYPE, None, close)
        elif path == "/healthz":
            age = node.last_collect_age_s()
            if age is None:
                body = {"status": "starting", "last_collect_age_s": None}
                self._respond("GET", 503, body, close=close)
                return
            stale = age > STALE_AFTER_INTERVALS * node.interval_s
            body = {"status": "stale" if stale else "ok", "last_collect_age_s": round(age, 3)}
            self._respond("GET", 503 if stale else 200, body, close=close)
        elif path == DESIRED_PATH:
            if not self._authorized(headers):
                self._respond("GET", *_UNAUTHORIZED, close=close)
                return
            self._respond("GET", 200, node.desired.document(), close=close)
        else:
            self._respond("GET", 404, {"error": f"not found: {path}"}, close=close)

    def _start_put(self, headers: _Headers, close: bool) -> None:
        # Check the token before reading a byte of the body.
        if not self._authorized(headers):
            self._respond("PUT", *_UNAUTHORIZED, close=True)
            return
        length = body_length(headers.get("content-length"))
        if isinstance(length, tuple):
            # 411 or 413: the body stays unread, so the connection cannot be reused.
            self._respond("PUT", *length, close=True)
            return
        self._awaiting = (headers, length)
        if close:
            headers["connection"] = "close"

    def _finish_put(self, headers: _Headers, body: bytes) -> None:
        node = self.site.node
        status, document = put_desired_state(node, headers.get("content-type", ""), body)
        if status == 200:
            node.invalidate()  # the next snapshot shows the new allocations
        close = headers.get("connection", "").lower() == "close"
        self._respond("PUT", status, document, close=close)

    def _respond(
        self,
        method: str,
        status: int,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
        close: bool = False,
    ) -> None:
        payload = json.dumps(body, separators=(",", ":")).encode()
        self._send(status, payload, JSON_CONTENT_TYPE, headers, close, method == "HEAD")

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None,
        close: bool,
        head_only: bool = False,
    ) -> None:
        if self.transport is None or self.closing:
            return
        lines = [
            f"HTTP/1.1 {status} {_REASONS[status]}",
            f"Server: {_SERVER}",
            f"Date: {_http_date()}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
        ]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if close:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.transport.write(head if head_only else head + body)
        if close:
            self.close()
