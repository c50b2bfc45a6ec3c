"""The fan-out HTTP client against real servers on loopback that answer byte by byte as told."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agents import fanout
from tests import procs

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


@pytest.fixture
def raw_server() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(handle: Callable[[RawServer, socket.socket, int], None], **kwargs) -> RawServer:
        server = RawServer(lambda conn, n: handle(server, conn, n), **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


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
    pool: fanout.Pool | None = None,
    token: str = TOKEN,
    timeout: float = 2.0,
    concurrency: int = 10,
    **options,
) -> list[list[fanout.Response]]:
    """``cycles`` calls of get_all on one pool in one loop; the responses of each."""

    async def run() -> list[list[fanout.Response]]:
        own = pool or fanout.Pool()
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


def get_one(url: str, **options) -> fanout.Response:
    return get([url], **options)[0][0]


def test_request_is_a_plain_get_with_host_token_and_identity(raw_server):
    server = raw_server(serve_forever(_answer()))
    response = get_one(server.url + "/v1/snapshot?view=portal", token="s3cret")
    assert response.ok and response.status == 200 and response.body == BODY
    assert response.attempts == 1
    head = server.requests[0].decode()
    lines = head.split("\r\n")
    assert lines[0] == "GET /v1/snapshot?view=portal HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}" in lines
    assert "Authorization: Bearer s3cret" in lines
    assert "Accept: application/json" in lines
    assert "Accept-Encoding: identity" in lines
    assert any(line.startswith("User-Agent: gpu-portal/") for line in lines)


def test_no_token_sends_no_authorization(raw_server):
    server = raw_server(serve_forever(_answer()))
    assert get_one(server.url, token="").ok
    assert b"authorization" not in server.requests[0].lower()
    assert server.requests[0].startswith(b"GET / HTTP/1.1\r\n")


def test_keep_alive_connection_is_reused_across_calls(raw_server):
    server = raw_server(serve_forever(_answer()))
    cycles = get([server.url], cycles=3)
    assert all(r[0].ok for r in cycles)
    assert server.connections == 1


def test_chunked_body_arriving_in_pieces_is_joined(raw_server):
    def handle(server, conn, number):
        while server.read(conn) is not None:
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for piece in (BODY[:10], BODY[10:11], BODY[11:]):
                conn.sendall(f"{len(piece):x};ext=1\r\n".encode())
                time.sleep(0.01)
                conn.sendall(piece + b"\r\n")
            conn.sendall(b"0\r\nX-Trailer: yes\r\n\r\n")

    server = raw_server(handle)
    cycles = get([server.url], cycles=2)
    assert [r[0].body for r in cycles] == [BODY, BODY]
    assert server.connections == 1  # the chunked framing left the connection reusable


def test_body_delimited_by_close_on_http_1_0(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
        conn.sendall(BODY[:5])
        time.sleep(0.02)
        conn.sendall(BODY[5:])

    server = raw_server(handle)
    cycles = get([server.url], cycles=2)
    assert [r[0].body for r in cycles] == [BODY, BODY]
    assert server.connections == 2


def test_connection_close_is_honoured_and_the_next_call_reconnects(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(_answer(BODY, "200 OK", "Connection: close"))
        # Keep the socket open a moment: the client must close it, not wait for us.
        time.sleep(0.3)

    server = raw_server(handle)
    started = time.monotonic()
    cycles = get([server.url], cycles=3)
    assert all(r[0].ok for r in cycles), cycles
    assert server.connections == 3
    assert time.monotonic() - started < 0.8  # it did not wait for the server's close


def test_interim_1xx_answers_are_skipped(raw_server):
    server = raw_server(serve_forever(b"HTTP/1.1 100 Continue\r\n\r\n" + _answer()))
    response = get_one(server.url)
    assert response.ok and response.body == BODY


def test_idle_connection_closed_by_the_server_is_dropped_between_calls(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(_answer())
        time.sleep(0.05)  # then close, idle, as servers with a short keep-alive do

    server = raw_server(handle)
    cycles = get([server.url], cycles=2, pause=0.3, retries=0)
    assert all(r[0].ok for r in cycles), cycles
    assert cycles[1][0].attempts == 1
    assert server.connections == 2


def test_reused_connection_lost_before_the_answer_is_sent_again_once(raw_server):
    # The keep-alive race: the server closes the connection just as the next request
    # is sent on it. GET is idempotent: it goes again on a fresh connection, silently.
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(_answer())
        server.read(conn)  # the next request on this connection: dropped unanswered

    server = raw_server(handle)
    cycles = get([server.url], cycles=3, retries=0)
    assert all(r[0].ok for r in cycles), cycles
    assert [r[0].attempts for r in cycles] == [1, 1, 1]
    assert server.connections == 3


def test_503_then_200_is_retried_and_succeeds(raw_server):
    busy = _answer(b'{"error": "no collection has completed yet"}', "503 Service Unavailable")

    def handle(server, conn, number):
        while server.read(conn) is not None:
            conn.sendall(busy if len(server.requests) == 1 else _answer())

    server = raw_server(handle)
    response = get_one(server.url, retries=2, backoff=0.05)
    assert response.ok and response.status == 200, response
    assert response.attempts == 2
    assert server.connections == 1  # the 503 was read whole: same connection


def test_agent_refusing_then_coming_up_within_the_deadline_is_read(raw_server):
    port = procs.free_port()
    servers = []

    def start_late() -> None:
        time.sleep(0.25)
        server = ThreadingHTTPServer(("127.0.0.1", port), _OkHandler)
        servers.append(server)
        server.serve_forever(poll_interval=0.05)

    threading.Thread(target=start_late, daemon=True).start()
    try:
        response = get_one(f"http://127.0.0.1:{port}", retries=5, backoff=0.1, timeout=5)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    assert response.ok, response
    assert response.attempts >= 2


def test_closed_port_fails_fast_after_the_retries_with_the_refusal():
    started = time.monotonic()
    response = get_one(f"http://127.0.0.1:{procs.free_port()}", retries=2, backoff=0.05)
    assert not response.ok
    assert "cannot connect" in response.error and "refused" in response.error
    assert response.attempts == 3
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize("kind", ["503", "refused"])
def test_retries_never_go_past_the_timeout(raw_server, kind):
    if kind == "503":
        busy = _answer(b"busy", "503 Service Unavailable")
        url = raw_server(serve_forever(busy)).url
    else:
        url = f"http://127.0.0.1:{procs.free_port()}"
    started = time.monotonic()
    response = get_one(url, retries=50, backoff=0.05, timeout=0.6)
    elapsed = time.monotonic() - started
    assert response.duration_s < 0.65  # the deadline, give or take the timer's lateness
    assert elapsed < 1.5
    assert 2 <= response.attempts < 10
    if kind == "503":
        assert response.status == 503 and response.body == b"busy"
    else:
        assert "refused" in response.error


def test_timeout_is_not_retried_and_closes_the_connection(raw_server):
    closed = threading.Event()

    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + BODY)  # then stalls
        if conn.recv(1) == b"":
            closed.set()

    server = raw_server(handle)
    response = get_one(server.url, retries=3, backoff=0.01, timeout=0.3)
    assert response.error == "timed out after 0.3 s"
    assert response.attempts == 1
    assert server.connections == 1
    assert closed.wait(2)


def test_a_hanging_agent_does_not_hold_up_the_others(raw_server):
    hung = raw_server(lambda server, conn, number: (server.read(conn), time.sleep(3)))
    fast = [raw_server(serve_forever(_answer())) for _ in range(3)]
    [responses] = get([hung.url] + [s.url for s in fast], concurrency=2, timeout=0.5)
    assert "timed out" in responses[0].error
    assert all(r.ok and r.duration_s < 0.4 for r in responses[1:]), responses


def test_content_length_over_the_limit_fails_at_once(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n")
        time.sleep(3)

    server = raw_server(handle)
    started = time.monotonic()
    response = get_one(server.url, max_body=1000, timeout=3)
    assert response.error.startswith("answer body larger than 1000 bytes")
    assert time.monotonic() - started < 1.5


def test_chunked_body_growing_past_the_limit_fails(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(100):
            conn.sendall(b"1000\r\n" + b"x" * 4096 + b"\r\n")

    server = raw_server(handle)
    response = get_one(server.url, max_body=10 * 1024)
    assert response.error.startswith("answer body larger than 10 KiB"), response
    assert response.attempts == 1


def test_close_delimited_body_growing_past_the_limit_fails(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 20000)

    server = raw_server(handle)
    response = get_one(server.url, max_body=10 * 1024)
    assert response.error.startswith("answer body larger than 10 KiB"), response


def test_head_larger_than_64_kib_fails(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"x" * 70000 + b"\r\n\r\n")

    response = get_one(raw_server(handle).url)
    assert response.error.startswith("answer head larger than 64 KiB"), response


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "malformed HTTP status line"),
        (b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "malformed HTTP status line"),
        (b"HTTP/2 200\r\n\r\n", "malformed HTTP status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed HTTP header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", "Content-Length"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "malformed HTTP body (Invalid character in chunk size)",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX",
            "Expected LF after chunk data",
        ),
        # int() refuses over 4,300 digits with a ValueError: a clear error, not a "lost" retry.
        (b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n", "Content-Length"),
        # A body in one-byte chunks costs the loop seconds per MiB: refused past 8,192 chunks.
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1\r\nx\r\n" * 9000,
            "more than 8192 chunks",
        ),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "unexpected HTTP 101"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "Content-Length can't be present with Transfer-Encoding",
        ),
    ],
)
def test_malformed_answers_fail_clearly_and_are_not_retried(raw_server, answer, reason):
    server = raw_server(serve_forever(answer))
    response = get_one(server.url, retries=2)
    assert reason in response.error, response
    assert server.url.removeprefix("http://") in response.error
    assert response.attempts == 1


@pytest.mark.parametrize(
    ("framing", "reason"),
    [
        # Trailer fields are a second head, measured as the first.
        (b"0\r\n" + b"X-Trailer: " + b"y" * 10_000 + b"\r\n", "answer head larger than 64 KiB"),
        # llhttp bounds no chunk-size line: a cap on all framing ends an endless extension.
        (b"2;ext=" + b"y" * 10_000, "with its framing"),
    ],
)
def test_endless_framing_is_refused(raw_server, framing, reason):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n")
        conn.sendall(framing)
        for _ in range(100):
            conn.sendall(b"y" * 10_000)

    response = get_one(raw_server(handle).url, max_body=1000, timeout=3)
    assert reason in response.error, response


def test_bytes_after_the_answer_make_the_connection_not_reused(raw_server):
    server = raw_server(serve_forever(_answer() + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
    cycles = get([server.url], cycles=2)
    assert [r[0].body for r in cycles] == [BODY, BODY], cycles
    assert server.connections == 2


def test_connection_dropped_mid_answer_is_retried(raw_server):
    def handle(server, conn, number):
        while server.read(conn) is not None:
            if number == 1:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + BODY[:5])
                return
            conn.sendall(_answer())

    server = raw_server(handle)
    response = get_one(server.url, retries=1, backoff=0.01)
    assert response.ok, response
    assert response.attempts == 2


def test_connection_dropped_mid_answer_is_an_error_without_retries(raw_server):
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + BODY[:5])

    response = get_one(raw_server(handle).url, retries=0)
    assert "before the answer was complete" in response.error, response


@pytest.mark.parametrize(
    ("url", "token", "reason"),
    [
        ("ftp://127.0.0.1/", "t", "unsupported URL scheme"),
        ("http://", "t", "invalid URL"),
        ("http://127.0.0.1:99999/", "t", "invalid URL"),
        ("http://127.0.0.1:1/", "t\r\nX-Evil: 1", "invalid characters"),
        ("http://127.0.0.1:1/a b", "t", "invalid characters"),
        ("http://127.0.0.1:1/", "tökén", "non-ASCII"),
    ],
)
def test_unusable_urls_and_tokens_fail_without_a_request(url, token, reason):
    response = get_one(url, token=token)
    assert reason in response.error, response
    assert response.attempts == 0


def test_unknown_host_is_a_clear_error_without_retries():
    response = get_one("http://no-such-host.invalid:9/", retries=3)
    assert response.error.startswith("cannot resolve no-such-host.invalid"), response
    assert response.attempts == 1


@pytest.mark.parametrize("host", ["gpu01..lab", "a" * 64 + ".lab"])
def test_a_host_name_that_cannot_be_encoded_fails_at_once_not_at_the_timeout(host):
    started = time.monotonic()
    response = get_one(f"http://{host}:9100/v1/snapshot", timeout=2.0, retries=2)
    assert "invalid host name" in response.error, response
    assert response.attempts == 1 and time.monotonic() - started < 1.0


def test_ipv6_literal(raw_server):
    server = raw_server(serve_forever(_answer()), host="::1")
    response = get_one(server.url + "/x")
    assert response.ok, response
    assert f"Host: [::1]:{server.port}".encode() in server.requests[0]


def test_concurrency_bounds_the_requests_in_flight(raw_server):
    state = {"now": 0, "most": 0}
    lock = threading.Lock()

    def handle(server, conn, number):
        while server.read(conn) is not None:
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            time.sleep(0.03)
            with lock:
                state["now"] -= 1
            conn.sendall(_answer())

    server = raw_server(handle)
    [responses] = get([server.url] * 20, concurrency=4)
    assert all(r.ok for r in responses)
    assert 2 <= state["most"] <= 4


def test_callback_sees_each_answer_and_its_errors_are_raised(raw_server):
    server = raw_server(serve_forever(_answer()))
    seen = []

    def on_response(index: int, response: fanout.Response) -> None:
        seen.append(index)
        if index == 1:
            raise ValueError("callback bug")

    with pytest.raises(ValueError, match="callback bug"):
        get([server.url] * 3, on_response=on_response)
    assert sorted(seen) == [0, 1, 2]


class _OkHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu-agent test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_path), str(key_path)


@pytest.fixture
def tls_server(tls_files) -> Iterator[str]:
    cert, key = tls_files
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OkHandler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_https_with_a_trusted_certificate(tls_server, tls_files):
    context = ssl.create_default_context(cafile=tls_files[0])
    cycles = get([tls_server + "/v1/snapshot"], cycles=2, pool=fanout.Pool(ssl_context=context))
    assert [r[0].body for r in cycles] == [BODY, BODY], cycles


def test_https_with_an_untrusted_certificate_is_a_clear_error(tls_server):
    response = get_one(tls_server, retries=2)  # the default context: system CAs only
    assert response.error.startswith("TLS error with 127.0.0.1:"), response
    assert "CERTIFICATE_VERIFY_FAILED" in response.error
    assert response.attempts == 1


def test_closing_the_pool_closes_its_connections(raw_server):
    closed = threading.Event()

    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(_answer())
        if server.read(conn) is None:
            closed.set()

    server = raw_server(handle)

    async def run() -> None:
        pool = fanout.Pool()
        assert (await pool.get_all([(server.url, TOKEN)], timeout=2, concurrency=1))[0].ok
        pool.close()
        with pytest.raises(RuntimeError, match="closed"):
            await pool.get_all([(server.url, TOKEN)], timeout=2, concurrency=1)

    asyncio.run(run())
    assert closed.wait(2)


# --- any method, with a body ------------------------------------------------------------


def send(request: fanout.Request, **options) -> fanout.Response:
    return fanout.send(request, **({"timeout": 2.0} | options))


def test_put_sends_its_json_body_with_length_type_and_token(raw_server):
    server = raw_server(serve_forever(_answer()))
    document = {"slices": [{"allocation_id": "a-1", "memory_mib": 1024}]}
    response = send(fanout.Request("PUT", server.url + "/v1/desired-state", "s3cret", document))
    assert response.ok and response.status == 200 and response.json() == orjson.loads(BODY)
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "PUT /v1/desired-state HTTP/1.1"
    assert "Content-Type: application/json" in lines
    assert f"Content-Length: {len(body)}" in lines
    assert "Authorization: Bearer s3cret" in lines
    assert orjson.loads(body) == document


def test_requests_of_any_method_share_a_keep_alive_connection(raw_server):
    def handle(server, conn, number):
        # Echoes the method and the body, read by its Content-Length (none: no body).
        while (head := server.read(conn)) is not None:
            head, _, body = head.partition(b"\r\n\r\n")
            _, _, length = head.partition(b"Content-Length: ")
            while len(body) < int(length.split(b"\r\n")[0] or 0):
                body += conn.recv(65536)
            conn.sendall(_answer(head.split(b" ")[0] + b" " + body))

    server = raw_server(handle)
    requests = [
        fanout.Request("GET", server.url),
        fanout.Request("POST", server.url, body=b"raw", content_type="text/plain"),
        fanout.Request("DELETE", server.url, headers={"X-Reason": "drained"}),
        fanout.Request("PUT", server.url, json=[1, 2]),
    ]

    async def run() -> list[fanout.Response]:
        pool = fanout.Pool()
        try:
            return await pool.send_all(requests, timeout=2, concurrency=1)
        finally:
            pool.close()

    responses = asyncio.run(run())
    assert [r.body for r in responses] == [b"GET ", b"POST raw", b"DELETE ", b"PUT [1,2]"]
    assert server.connections == 1
    assert b"X-Reason: drained\r\n" in server.requests[2]
    assert b"Content-Length" not in server.requests[0]


def test_a_post_lost_on_a_reused_connection_is_not_sent_again(raw_server):
    # The server may have acted on it before the connection dropped: only idempotent
    # methods (GET, PUT, DELETE) are sent a second time.
    def handle(server, conn, number):
        server.read(conn)
        conn.sendall(_answer())
        server.read(conn)  # then dropped unanswered

    server = raw_server(handle)

    async def run() -> list[fanout.Response]:
        pool = fanout.Pool()
        try:
            out = []
            for method in ("GET", "POST"):
                request = fanout.Request(method, server.url)
                out += await pool.send_all([request], timeout=2, concurrency=1, retries=2)
            return out
        finally:
            pool.close()

    first, post = asyncio.run(run())
    assert first.ok
    assert "closed before the answer" in post.error and post.attempts == 1
    assert server.connections == 1


@pytest.mark.parametrize(
    "request_",
    [
        fanout.Request("get", "http://127.0.0.1:1/"),
        fanout.Request("GET /x", "http://127.0.0.1:1/"),
        fanout.Request("HEAD", "http://127.0.0.1:1/"),
        fanout.Request("PUT", "http://127.0.0.1:1/", headers={"Content-Length": "1"}),
        fanout.Request("PUT", "http://127.0.0.1:1/", headers={"X-A": "1\r\nX-B: 2"}),
        fanout.Request("PUT", "http://127.0.0.1:1/", headers={"Bad Name": "1"}),
        fanout.Request("GET", "http://127.0.0.1:1/", headers={"authorization": "Basic x"}),
    ],
)
def test_a_malformed_method_or_header_is_the_callers_error(request_):
    with pytest.raises(ValueError, match=r"HEAD|invalid"):
        send(request_)


def test_put_desired_state_to_a_real_agent_shows_in_its_snapshot(sim_agents):
    agents = sim_agents(1, 2, 60.0)  # one collection a minute: only the PUT can refresh it
    url = agents.urls[0]
    snapshot = send(fanout.Request("GET", url + "/v1/snapshot", agents.token)).json()
    slice_ = {
        "allocation_id": "a-1", "gpu_uuid": snapshot["gpus"][1]["uuid"], "compute_pct": 30,
        "memory_mib": 8192, "owner": "alice",
    }  # fmt: skip
    put = fanout.Request("PUT", url + "/v1/desired-state", agents.token, {"slices": [slice_]})
    response = send(put)
    assert response.status == 200, response
    assert response.json()["generation"] == 1
    served = send(fanout.Request("GET", url + "/v1/desired-state", agents.token)).json()
    [entry] = served["slices"]
    assert entry["launch_env"]["CUDA_DEVICE_SM_LIMIT"] == "30"
    snapshot = send(fanout.Request("GET", url + "/v1/snapshot", agents.token)).json()
    assert [a["allocation_id"] for a in snapshot["allocations"]] == ["a-1"]
    # The same document again is a new generation: the agent stores what it is sent.
    assert send(put).json()["generation"] == 2


def test_put_to_a_real_agent_is_refused_without_the_token_or_with_bad_slices(sim_agents):
    agents = sim_agents(1, 1)
    url = agents.urls[0] + "/v1/desired-state"
    refused = send(fanout.Request("PUT", url, "wrong", {"slices": []}))
    assert refused.status == 401 and "bearer token" in refused.json()["error"]
    bad = send(fanout.Request("PUT", url, agents.token, {"slices": "all"}))
    assert bad.status == 422 and "expected a list" in bad.json()["error"]
    text = fanout.Request("PUT", url, agents.token, body=b"{}", content_type="text/plain")
    assert send(text).status == 415
    assert send(fanout.Request("GET", url, agents.token)).json()["generation"] == 0
