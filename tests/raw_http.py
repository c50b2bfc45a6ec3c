"""Loopback servers that answer byte by byte as a test tells them, and the fan-out calls
the client tests make against them (tests/test_fanout.py, tests/test_fanout_pool.py)."""

import asyncio
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from agents import client as agent_client

BODY = b'{"gpus": [{"uuid": "GPU-1", "index": 0}]}'
TOKEN = "test-token"


def _answer(body: bytes = BODY, status: str = "200 OK", *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_request(conn: socket.socket) -> bytes | None:
    """One request head, or None when the client closed the connection first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


class RawServer:
    """A loopback TCP server; each connection runs ``handle(conn, number)`` in a thread."""

    def __init__(
        self, handle: Callable[[socket.socket, int], None], host: str = "127.0.0.1"
    ) -> None:
        self.handle = handle
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{self.port}"
        self.connections = 0
        self.requests: list[bytes] = []
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._run, args=(conn, self.connections), daemon=True).start()

    def _run(self, conn: socket.socket, number: int) -> None:
        conn.settimeout(10)
        try:
            self.handle(conn, number)
        except OSError:
            pass
        finally:
            conn.close()

    def read(self, conn: socket.socket) -> bytes | None:
        head = read_request(conn)
        if head is not None:
            self.requests.append(head)
        return head

    def close(self) -> None:
        self.stopped = True
        self.sock.close()


# What a test's server does with each connection: (server, connection, its number).
Handle = Callable[["RawServer", socket.socket, int], None]


def serve_forever(answer: bytes) -> Callable[[RawServer, socket.socket, int], None]:
    """A keep-alive server giving the same answer to every request."""

    def handle(server: RawServer, conn: socket.socket, number: int) -> None:
        while server.read(conn) is not None:
            conn.sendall(answer)

    return handle


def get(
    urls: list[str],
    *,
    cycles: int = 1,
    pause: float = 0.0,
    pool: agent_client.Pool | None = None,
    token: str = TOKEN,
    timeout: float = 2.0,
    concurrency: int = 10,
    **options,
) -> list[list[agent_client.Response]]:
    """``cycles`` calls of get_all on one pool in one loop; the responses of each."""

    async def run() -> list[list[agent_client.Response]]:
        own = pool or agent_client.Pool()
        out = []
        try:
            for cycle in range(cycles):
                if cycle:
                    await asyncio.sleep(pause)
                out.append(
                    await own.get_all(
                        [(url, token) for url in urls],
                        timeout=timeout,
                        concurrency=concurrency,
                        **options,
                    )
                )
        finally:
            own.close()
        return out

    return asyncio.run(run())


def get_one(url: str, **options) -> agent_client.Response:
    return get([url], **options)[0][0]


class OkHandler(BaseHTTPRequestHandler):
    """Answers every GET with BODY, keep-alive."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args) -> None:
        pass


def send(request: agent_client.Request, **options) -> agent_client.Response:
    return agent_client.send(request, **({"timeout": 2.0} | options))
