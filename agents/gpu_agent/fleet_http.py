"""The agent's HTTP endpoints as an asyncio protocol, for one loop serving many virtual nodes.

Same endpoints, status codes, headers and bodies as ``server.py`` (which stays the
server of a real node), but with no thread per server or connection: a thousand
listening ports and their keep-alive connections cost one thread and a few KB each.
Only what the portal, Prometheus and curl send is parsed: a request line, headers
ending in a blank line, and a body only for PUT /v1/desired-state (Content-Length,
no chunked encoding: that gets 411 as it does from ``server.py``).
"""

from __future__ import annotations

import asyncio
import hmac
import io
import json
import logging
import time
from email.utils import formatdate
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from agents.gpu_agent import __version__
from agents.gpu_agent.desired_http import DESIRED_PATH, MAX_BODY_BYTES, put_desired_state
from agents.gpu_agent.lazy import LazyNode
from agents.gpu_agent.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from agents.gpu_agent.server import JSON_CONTENT_TYPE, STALE_AFTER_INTERVALS
from agents.gpu_agent.snapshot_views import UnknownView, requested_view

log = logging.getLogger(__name__)

# http.server's limits: 64 KiB per line, 100 headers; a bigger head is not a portal.
MAX_HEAD_BYTES = 64 * 1024 + 100 * 1024
IDLE_TIMEOUT_S = 60.0  # as server.py's handler timeout: idle keep-alive connections close
_SERVER = f"gpu-agent/{__version__}"
_UNAUTHORIZED = (
    401,
    {"error": "missing or invalid bearer token"},
    {"WWW-Authenticate": 'Bearer realm="gpu-agent"'},
)


class Site:
    """What one listening port serves: a node and its access rules."""

    def __init__(self, node: LazyNode, token: str | None, metrics_auth: bool) -> None:
        self.node = node
        self.token = token.encode() if token is not None else None
        self.metrics_auth = metrics_auth


class _Headers(dict[str, str]):
    """Header names are case-insensitive; keys are stored lower-cased."""

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, name.lower(), default)


class _PutRequest:
    """What ``put_desired_state`` reads from a request, shaped like a BaseHTTPRequestHandler."""

    def __init__(self, node: LazyNode, headers: _Headers, body: bytes) -> None:
        self.server = self
        self.collector = node
        self.headers = headers
        self.rfile = io.BytesIO(body)
        self.close_connection = False


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
    """One client connection to one virtual node; requests are answered in arrival order."""

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
        length = headers.get("content-length")
        if length is None or not length.isdigit() or int(length) > MAX_BODY_BYTES:
            # put_desired_state answers 411/413 without reading, and asks to close.
            self._finish_put(headers, b"", close)
            return
        self._awaiting = (headers, int(length))
        if close:
            headers["connection"] = "close"

    def _finish_put(self, headers: _Headers, body: bytes, close: bool = False) -> None:
        node = self.site.node
        request = _PutRequest(node, headers, body)
        status, document = put_desired_state(request)
        if status == 200:
            node.invalidate()  # the next snapshot shows the new allocations at once
        asked_to_close = headers.get("connection", "").lower() == "close"
        close = close or request.close_connection or asked_to_close
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
