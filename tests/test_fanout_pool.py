"""The fan-out client's pool: concurrency, callbacks, TLS, closing, and requests of any
method with a body, against loopback servers (tests/raw_http.py) and real agents."""

import asyncio
import datetime
import ipaddress
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agents import client as agent_client
from tests.raw_http import (
    BODY,
    TOKEN,
    OkHandler,
    _answer,
    get,
    get_one,
    send,
    serve_forever,
)


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

    def on_response(index: int, response: agent_client.Response) -> None:
        seen.append(index)
        if index == 1:
            raise ValueError("callback bug")

    with pytest.raises(ValueError, match="callback bug"):
        get([server.url] * 3, on_response=on_response)
    assert sorted(seen) == [0, 1, 2]


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
    server = ThreadingHTTPServer(("127.0.0.1", 0), OkHandler)
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
    cycles = get(
        [tls_server + "/v1/snapshot"], cycles=2, pool=agent_client.Pool(ssl_context=context)
    )
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
        pool = agent_client.Pool()
        assert (await pool.get_all([(server.url, TOKEN)], timeout=2, concurrency=1))[0].ok
        pool.close()
        with pytest.raises(RuntimeError, match="closed"):
            await pool.get_all([(server.url, TOKEN)], timeout=2, concurrency=1)

    asyncio.run(run())
    assert closed.wait(2)


# --- any method, with a body ------------------------------------------------------------


def test_put_sends_its_json_body_with_length_type_and_token(raw_server):
    server = raw_server(serve_forever(_answer()))
    document = {"slices": [{"allocation_id": "a-1", "memory_mib": 1024}]}
    response = send(
        agent_client.Request("PUT", server.url + "/v1/desired-state", "s3cret", document)
    )
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
        agent_client.Request("GET", server.url),
        agent_client.Request("POST", server.url, body=b"raw", content_type="text/plain"),
        agent_client.Request("DELETE", server.url, headers={"X-Reason": "drained"}),
        agent_client.Request("PUT", server.url, json=[1, 2]),
    ]

    async def run() -> list[agent_client.Response]:
        pool = agent_client.Pool()
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

    async def run() -> list[agent_client.Response]:
        pool = agent_client.Pool()
        try:
            out = []
            for method in ("GET", "POST"):
                request = agent_client.Request(method, server.url)
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
        agent_client.Request("get", "http://127.0.0.1:1/"),
        agent_client.Request("GET /x", "http://127.0.0.1:1/"),
        agent_client.Request("HEAD", "http://127.0.0.1:1/"),
        agent_client.Request("PUT", "http://127.0.0.1:1/", headers={"Content-Length": "1"}),
        agent_client.Request("PUT", "http://127.0.0.1:1/", headers={"X-A": "1\r\nX-B: 2"}),
        agent_client.Request("PUT", "http://127.0.0.1:1/", headers={"Bad Name": "1"}),
        agent_client.Request("GET", "http://127.0.0.1:1/", headers={"authorization": "Basic x"}),
    ],
)
def test_a_malformed_method_or_header_is_the_callers_error(request_):
    with pytest.raises(ValueError, match=r"HEAD|invalid"):
        send(request_)


def test_put_desired_state_to_a_real_agent_shows_in_its_snapshot(sim_agents):
    agents = sim_agents(1, 2, 60.0)  # one collection a minute: only the PUT can refresh it
    url = agents.urls[0]
    snapshot = send(agent_client.Request("GET", url + "/v1/snapshot", agents.token)).json()
    slice_ = {
        "allocation_id": "a-1", "gpu_uuid": snapshot["gpus"][1]["uuid"], "compute_pct": 30,
        "memory_mib": 8192, "owner": "alice",
    }  # fmt: skip
    put = agent_client.Request("PUT", url + "/v1/desired-state", agents.token, {"slices": [slice_]})
    response = send(put)
    assert response.status == 200, response
    assert response.json()["generation"] == 1
    served = send(agent_client.Request("GET", url + "/v1/desired-state", agents.token)).json()
    [entry] = served["slices"]
    assert entry["launch_env"]["CUDA_DEVICE_SM_LIMIT"] == "30"
    snapshot = send(agent_client.Request("GET", url + "/v1/snapshot", agents.token)).json()
    assert [a["allocation_id"] for a in snapshot["allocations"]] == ["a-1"]
    # The same document again is a new generation: the agent stores what it is sent.
    assert send(put).json()["generation"] == 2


def test_put_to_a_real_agent_is_refused_without_the_token_or_with_bad_slices(sim_agents):
    agents = sim_agents(1, 1)
    url = agents.urls[0] + "/v1/desired-state"
    refused = send(agent_client.Request("PUT", url, "wrong", {"slices": []}))
    assert refused.status == 401 and "bearer token" in refused.json()["error"]
    bad = send(agent_client.Request("PUT", url, agents.token, {"slices": "all"}))
    assert bad.status == 422 and "expected a list" in bad.json()["error"]
    text = agent_client.Request("PUT", url, agents.token, body=b"{}", content_type="text/plain")
    assert send(text).status == 415
    assert send(agent_client.Request("GET", url, agents.token)).json()["generation"] == 0
