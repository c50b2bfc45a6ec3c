"""The websocket's gate: only this site's own origin (scheme, host and port) gets in, and a
path nobody serves is closed cleanly, through the ASGI application and a real daphne."""

from __future__ import annotations

import base64
import logging
import os
import socket
import time

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from portal.asgi import application
from tests import clients, procs

pytestmark = pytest.mark.django_db(transaction=True)


def _connect(path: str, headers: list[tuple[bytes, bytes]], scheme: str = "ws"):
    async def run():
        communicator = WebsocketCommunicator(application, path, headers=headers)
        communicator.scope["scheme"] = scheme
        connected, code = await communicator.connect(timeout=5)
        await communicator.disconnect()
        return connected, code

    return async_to_sync(run)()


@pytest.mark.parametrize(
    ("origin", "host", "scheme", "allowed"),
    [
        (b"http://localhost", b"localhost", "ws", True),
        (b"http://localhost:8000", b"localhost:8000", "ws", True),
        (b"https://localhost", b"localhost", "wss", True),
        (b"HTTP://LOCALHOST:80", b"localhost", "ws", True),
        # Same host name, another scheme or port: another site as far as browsers go.
        (b"https://localhost", b"localhost", "ws", False),
        (b"http://localhost", b"localhost", "wss", False),
        (b"http://localhost:8001", b"localhost:8000", "ws", False),
        (b"http://localhost", b"localhost:8000", "ws", False),
        (b"http://evil.example", b"localhost", "ws", False),
        (b"null", b"localhost", "ws", False),
        (b"http://localhost", b"evil.example", "ws", False),  # a host not allowed
        (b"http://evil.example", b"evil.example", "ws", False),
    ],
)
def test_only_the_sites_own_origin_opens_a_socket(bob, origin, host, scheme, allowed):
    headers = [(b"origin", origin), (b"host", host), clients.cookie_header(bob)]
    connected, _ = _connect("/ws/fleet/", headers, scheme)
    assert connected is allowed


def test_a_socket_without_an_origin_is_refused(bob):
    connected, _ = _connect("/ws/fleet/", [(b"host", b"localhost"), clients.cookie_header(bob)])
    assert connected is False


def test_behind_a_tls_proxy_the_browsers_scheme_is_the_proxys_header(bob, settings):
    settings.ALLOWED_HOSTS = ["gpu-portal.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    base = [(b"host", b"gpu-portal.example.com"), clients.cookie_header(bob)]
    https = [(b"x-forwarded-proto", b"https"), *base]
    assert _connect("/ws/fleet/", [(b"origin", b"https://gpu-portal.example.com"), *https])[0]
    assert not _connect("/ws/fleet/", [(b"origin", b"http://gpu-portal.example.com"), *https])[0]
    http = [(b"x-forwarded-proto", b"http"), *base]
    assert not _connect("/ws/fleet/", [(b"origin", b"https://gpu-portal.example.com"), *http])[0]


def test_an_origin_the_operator_trusts_is_let_in_exactly(bob, settings):
    # A proxy that rewrites Host: the public origin is listed, as for Django's CSRF check.
    settings.ALLOWED_HOSTS = ["web"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://gpu-portal.example.com", "https://*.example.org"]
    base = [(b"host", b"web:8000"), clients.cookie_header(bob)]
    for origin, allowed in [
        (b"https://gpu-portal.example.com", True),
        (b"https://gpu-portal.example.com:443", True),
        (b"https://gpu-portal.example.com:8443", False),
        (b"http://gpu-portal.example.com", False),
        (b"https://a.example.org", True),
        (b"http://a.example.org", False),
        (b"https://example.org.evil.example", False),
    ]:
        assert _connect("/ws/fleet/", [(b"origin", origin), *base])[0] is allowed, origin


@pytest.mark.parametrize(
    "path", ["/ws/nope/", "/", "/ws/nodes/abc/", "/ws/nodes/99999999999999999999/"]
)
def test_an_unknown_path_is_closed_without_a_server_error(bob, caplog, path):
    caplog.set_level(logging.WARNING)
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        clients.cookie_header(bob),
    ]
    assert _connect(path, headers) == (False, 4404)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


# --- a real client against daphne ------------------------------------------------------------


def _handshake(port: int, path: str, origin: str) -> bytes:
    """A browser's websocket upgrade request, sent by hand; the status line that came back."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: {origin}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        return sock.recv(4096).split(b"\r\n", 1)[0]


def test_daphne_refuses_unknown_paths_and_foreign_origins_and_logs_no_error(
    child_env_for_test_db,
):
    env = {**child_env_for_test_db, "ALLOWED_HOSTS": "127.0.0.1"}
    with procs.daphne(env) as (own, daphne):
        port = int(own.rsplit(":", 1)[1])
        assert b" 403 " in _handshake(port, "/ws/not-a-socket/", own) + b" "
        assert b" 403 " in _handshake(port, "/ws/fleet/", f"http://127.0.0.1:{port + 1}") + b" "
        # Anonymous on a real path: accepted by the gate, then closed by the consumer.
        assert b" 403 " in _handshake(port, "/ws/fleet/", own) + b" "
        time.sleep(0.5)  # let daphne write what it would log about them
    output = "".join(daphne.lines)
    assert "Traceback" not in output and " ERROR " not in output, output


def test_a_frame_to_a_socket_the_browser_closed_is_dropped_not_a_traceback():
    # daphne raises Disconnected when a page left between a consumer's accept and its
    # first frame (seen in the newcomer walk: a traceback in the portal's log).
    from autobahn.exception import Disconnected

    from portal.websocket import sends_until_closed

    sent: list[dict] = []

    async def closed(message: dict) -> None:
        raise Disconnected("Attempt to send on a closed protocol")

    async def open_(message: dict) -> None:
        sent.append(message)

    async def broken(message: dict) -> None:
        raise RuntimeError("a real fault")

    async_to_sync(sends_until_closed(closed))({"type": "websocket.send", "text": "x"})
    async_to_sync(sends_until_closed(open_))({"type": "websocket.send", "text": "y"})
    assert sent == [{"type": "websocket.send", "text": "y"}]
    with pytest.raises(RuntimeError):  # anything else is still a fault
        async_to_sync(sends_until_closed(broken))({"type": "websocket.send", "text": "z"})
