"""The agent's HTTP endpoints, on the standard library's threading HTTP server.

``/v1/snapshot`` (bearer token) is what the portal polls, whole or as the compact
``?view=portal`` (``snapshot_views.py``); ``/v1/desired-state``
(bearer token, GET and PUT) is where it sends this node's slices; ``/metrics`` is
for a Prometheus that already scrapes dcgm-exporter (a token only with
``--metrics-auth``); ``/healthz`` is for liveness probes and tells nothing else.
Handlers only copy bytes the collector prepared, so they answer in
microseconds whatever the card is doing.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from agents.gpu_agent import __version__
from agents.gpu_agent.collector import Collector
from agents.gpu_agent.desired_http import DESIRED_PATH, put_desired_state
from agents.gpu_agent.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from agents.gpu_agent.snapshot_views import UnknownView, requested_view

log = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json"
# /healthz turns 503 when the data is older than this many collection periods.
STALE_AFTER_INTERVALS = 5


class AgentHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        collector: Collector,
        token: str | None,
        metrics_auth: bool = False,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.collector = collector
        # None means --no-auth: the snapshot is served to anyone who can reach the port.
        self.token = token.encode() if token is not None else None
        # Off by default: Prometheus scrape configs for dcgm-exporter carry no token.
        self.metrics_auth = metrics_auth
        super().__init__(address, AgentRequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The default prints a traceback to stderr for every client that hangs up early.
        log.debug("error serving %s", client_address, exc_info=True)


class AgentRequestHandler(BaseHTTPRequestHandler):
    server: AgentHTTPServer
    # Keep-alive lets the portal poll many nodes without a TCP handshake per request.
    protocol_version = "HTTP/1.1"
    server_version = f"gpu-agent/{__version__}"
    timeout = 60  # closes idle keep-alive connections so they do not pin threads

    def version_string(self) -> str:
        # The default appends the Python version, which a scanner need not learn.
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        target = urlsplit(self.path)
        path = target.path
        if path == "/v1/snapshot":
            self._snapshot(target.query)
        elif path == "/metrics":
            self._metrics()
        elif path == "/healthz":
            self._healthz()
        elif path == DESIRED_PATH:
            if self._require_token():
                self._json(200, self.server.collector.desired.document())
        else:
            self._json(404, {"error": f"not found: {path}"})

    def do_PUT(self) -> None:
        path = urlsplit(self.path).path
        if path != DESIRED_PATH:
            self._not_allowed()
            return
        # Check the token before reading a byte of the body.
        if not self._require_token():
            self.close_connection = True
            return
        status, body = put_desired_state(self)
        self._json(status, body)

    def _not_allowed(self) -> None:
        # The request body (if any) is not read, so the connection cannot be reused.
        self.close_connection = True
        path = urlsplit(self.path).path
        allow = "GET, PUT" if path == DESIRED_PATH else "GET"
        self._json(405, {"error": f"method {self.command} not allowed"}, {"Allow": allow})

    do_POST = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = _not_allowed

    def _require_token(self) -> bool:
        if self._authorized():
            return True
        self._json(
            401,
            {"error": "missing or invalid bearer token"},
            {"WWW-Authenticate": 'Bearer realm="gpu-agent"'},
        )
        return False

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        scheme, _, credentials = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(credentials.strip().encode("utf-8", "replace"), token)

    def _snapshot(self, query: str) -> None:
        if not self._require_token():
            return
        try:
            view = requested_view(query)
        except UnknownView as exc:
            self._json(400, {"error": str(exc)})
            return
        published = self.server.collector.published
        if published is None:
            self._json(503, {"error": "no collection has completed yet"}, {"Retry-After": "1"})
            return
        self._send(200, published.views[view], JSON_CONTENT_TYPE)

    def _metrics(self) -> None:
        if self.server.metrics_auth and not self._require_token():
            return
        published = self.server.collector.published
        if published is None:
            self._send(503, b"# no collection has completed yet\n", METRICS_CONTENT_TYPE)
            return
        self._send(200, published.metrics_text, METRICS_CONTENT_TYPE)

    def _healthz(self) -> None:
        collector = self.server.collector
        age = collector.last_collect_age_s()
        if age is None:
            self._json(503, {"status": "starting", "last_collect_age_s": None})
            return
        stale = age > STALE_AFTER_INTERVALS * collector.interval_s
        status = "stale" if stale else "ok"
        self._json(503 if stale else 200, {"status": status, "last_collect_age_s": round(age, 3)})

    def _json(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        payload = json.dumps(body, separators=(",", ":")).encode()
        self._send(status, payload, JSON_CONTENT_TYPE, headers)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
