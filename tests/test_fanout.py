"""The fan-out client's framing, limits, retries and errors, against real servers on loopback
that answer byte by byte as told (tests/raw_http.py)."""

import threading
import time
from http.server import ThreadingHTTPServer

import pytest

from tests import procs
from tests.raw_http import BODY, OkHandler, _answer, get, get_one, serve_forever


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
        server = ThreadingHTTPServer(("127.0.0.1", port), OkHandler)
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
