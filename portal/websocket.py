"""The websocket's gate: an exact same-origin check, and a clean close for unknown paths.

Channels' AllowedHostsOriginValidator compares only the Origin's host name with ALLOWED_HOSTS,
so a page served from another port or over plain HTTP on the same host could open the
portal's sockets with the user's cookie. Here the Origin must be the connection's own origin
(scheme, host and port), or one the operator listed in CSRF_TRUSTED_ORIGINS: the rule
Django's CSRF check applies to a form post.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from asgiref.sync import ThreadSensitiveContext
from autobahn.exception import Disconnected
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import is_same_domain, split_domain_port, validate_host

# A path no consumer serves: the application range, like the live consumers' 4404.
CLOSE_NOT_FOUND = 4404
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the default port filled in; None for anything malformed."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None or parts.path or parts.query or parts.username:
        return None
    return scheme, parts.hostname, port


def _allowed_hosts() -> list[str]:
    # Django's own fallback while DEBUG is on and ALLOWED_HOSTS is empty.
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return list(settings.ALLOWED_HOSTS)


def _is_secure(scope: dict[str, Any], headers: dict[bytes, bytes]) -> bool:
    # Behind a TLS proxy the scheme the browser used is the proxy's header (as for
    # request.is_secure()); otherwise the connection's own.
    proxy_header = settings.SECURE_PROXY_SSL_HEADER
    if proxy_header:
        name = proxy_header[0].removeprefix("HTTP_").lower().replace("_", "-").encode()
        if name in headers:
            value = headers[name].decode("latin1").split(",")[0].strip()
            return value == proxy_header[1]
    return scope.get("scheme") == "wss"


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = dict(scope.get("headers", []))
    raw_origin, raw_host = headers.get(b"origin"), headers.get(b"host")
    if not raw_origin or not raw_host:
        return False
    host = raw_host.decode("latin1").strip().lower()
    domain, _port = split_domain_port(host)
    if not domain or not validate_host(domain, _allowed_hosts()):
        return False
    origin_text = raw_origin.decode("latin1").strip().lower()
    scheme, _, netloc = origin_text.partition("://")
    origin = _origin(scheme, netloc)
    if origin is None:
        return False
    own = _origin("https" if _is_secure(scope, headers) else "http", host)
    if origin == own:
        return True
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        trusted_scheme, _, trusted_netloc = trusted.lower().partition("://")
        if trusted_netloc.startswith("*."):
            # Django's wildcard form: any subdomain, same scheme (and port, if given).
            wildcard = _origin(trusted_scheme, trusted_netloc[1:].lstrip("."))
            if (
                wildcard
                and origin[0] == wildcard[0]
                and origin[2] == wildcard[2]
                and is_same_domain(origin[1], "." + wildcard[1])
            ):
                return True
        elif origin == _origin(trusted_scheme, trusted_netloc):
            return True
    return False


class SameOriginValidator:
    """ASGI middleware: a websocket from any other origin is refused before it is accepted."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            return await self.application(scope, receive, send)
        if not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, sends_until_closed(send))


# Threads for the websockets' synchronous work: a few, so that a slow lookup does not hold
# up every other socket, and not one per socket, which on two cores made 200 connects
# share the CPU and all finish late (and all build the fleet picture at once).
SOCKET_SYNC_THREADS = 4
_socket_sync = ThreadPoolExecutor(SOCKET_SYNC_THREADS, thread_name_prefix="websocket-sync")


class SyncWorkPerSocket:
    """ASGI middleware: the websockets' synchronous work (the session and user lookup, a
    page's first picture, a node page's watch) runs in a small pool of threads.

    Without it asgiref runs the thread-sensitive calls of every socket of the process one
    after another in one thread, each opening its own database connection: dashboards
    connecting while the database was busy queued there past daphne's 5 s handshake
    timeout, and daphne dropped them before they were accepted: clients that got no update
    at all. Each call of a socket's may run in another thread of the pool; none of them
    keeps a transaction or a connection from one call to the next.
    """

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        async with ThreadSensitiveContext(executor=_socket_sync):
            return await self.application(scope, receive, send)


def sends_until_closed(send: Any) -> Any:
    """``send``, with a frame to a socket the browser has already closed dropped: a page
    left between a consumer's accept and its first frames made daphne raise
    ``Disconnected`` (a traceback in the log for a normal navigation). The consumer
    gets its ``websocket.disconnect`` next and ends."""

    async def send_or_drop(message: dict[str, Any]) -> None:
        try:
            await send(message)
        except Disconnected:
            return

    return send_or_drop


class NotFoundConsumer(AsyncWebsocketConsumer):
    """The last route: a socket to a path nobody serves is refused, not a server error."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
