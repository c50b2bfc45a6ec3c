"""A real HTTP server on loopback that records every request and answers as told.

For the tests of what the portal sends where (tokens, connection tests): a test points a
node or a connection test at it, then reads ``requests`` to see what arrived. A test module
imports ``recorder_fixture`` and asks for ``recorder``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Recorder:
    url: str
    requests: list[dict[str, str]] = field(default_factory=list)
    status: int = 200
    body: bytes = b"{}"

    def authorizations(self) -> list[str]:
        return [r.get("authorization", "") for r in self.requests]


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            headers = {key.lower(): value for key, value in self.headers.items()}
            recorder.requests.append({"path": self.path} | headers)
            self.send_response(recorder.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(recorder.body)))
            self.end_headers()
            self.wfile.write(recorder.body)

        def log_message(self, *args) -> None:
            pass

    return Handler


@pytest.fixture(name="recorder")
def recorder_fixture() -> Iterator[Recorder]:
    """One recording server on 127.0.0.1 (a fresh port), stopped after the test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    recorder = Recorder(url=f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(recorder)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield recorder
    server.shutdown()
    server.server_close()
