"""The portal connects to agents only where agents may be.

Link-local addresses (cloud metadata) and the portal's own database and Redis are refused
by default; AGENT_NETWORKS_ALLOW and AGENT_NETWORKS_DENY narrow it further. Registration
refuses a URL whose address is refused; every connection (connection test, poller) checks
every address its host name resolves to and connects only to those it checked. A
connection test never shows what the far end wrote, only what its status means.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils import translation

from agents import connection_test, node_files, registration
from agents.models import Node
from portal import env
from telemetry import poller
from tests import clients
from tests.api import error_fields
from tests.recorder import recorder_fixture  # noqa: F401 (the recorder fixture)

pytestmark = pytest.mark.django_db

TOKEN = "tok-0123456789-network"


@pytest.fixture(autouse=True)
def _english() -> Iterator[None]:
    # The messages are read here in English, whatever an earlier test left active.
    with translation.override("en"):
        yield


def _portal_services() -> list[tuple[str, int]]:
    database = settings.DATABASES["default"]
    redis_port = int(settings.REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    return [(database["HOST"], int(database["PORT"] or 5432)), ("127.0.0.1", redis_port)]


def _refused_at_registration(url: str) -> list[str]:
    with pytest.raises(ValidationError) as refused:
        registration.register_node(name="gpu-x", agent_url=url, token=TOKEN)
    return refused.value.message_dict["agent_url"]


# --- registration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254",
        "http://169.254.169.254:80/latest",
        "http://[fe80::1]:9400",
        "http://[::ffff:169.254.169.254]:9400",
    ],
)
def test_link_local_agent_urls_are_refused_by_default(url):
    assert _refused_at_registration(url)
    assert not Node.objects.exists()


def test_the_portals_own_database_and_redis_are_refused():
    for host, port in _portal_services():
        for alias in {
            host,
            "127.0.0.1",
            "localhost",
            "0.0.0.0",  # noqa: S104 (an address in a URL)
            "[::ffff:127.0.0.1]",
        }:
            [message] = _refused_at_registration(f"http://{alias}:{port}")
            assert "own services" in message
    # Another port on the same host is an agent like any other.
    registration.register_node(name="gpu-local", agent_url="http://127.0.0.1:9400")


def test_allowed_networks_narrow_where_agents_may_be(settings):
    settings.AGENT_NETWORKS_ALLOW = ["10.0.0.0/8", "fd00::/8"]
    assert _refused_at_registration("http://192.168.1.5:9400")
    registration.register_node(name="gpu-10", agent_url="http://10.1.2.3:9400")
    registration.register_node(name="gpu-fd", agent_url="http://[fd00::5]:9400")
    # A host name is judged when it is resolved, not when it is registered.
    registration.register_node(name="gpu-name", agent_url="http://gpu-name:9400")


def test_denied_networks_are_the_settings_own(settings):
    settings.AGENT_NETWORKS_DENY = ["10.9.0.0/16"]
    assert _refused_at_registration("http://10.9.1.1:9400")
    registration.register_node(name="gpu-ll", agent_url="http://169.254.10.10:9400")


def test_the_api_and_an_import_refuse_a_denied_url(alice):
    client = clients.api(alice)
    body = {"name": "gpu-md", "agent_url": "http://169.254.169.254", "token": TOKEN}
    response = client.post("/api/v1/nodes/", body, format="json")
    assert response.status_code == 400 and set(error_fields(response)) == {"agent_url"}
    rows = node_files.parse("name,agent_url\ngpu-md,http://169.254.169.254:80\n", "csv")
    report = registration.import_nodes(rows)
    assert [(e.row, e.field) for e in report.errors] == [(1, "agent_url")]
    assert not Node.objects.exists()


def test_malformed_networks_stop_the_portal_at_start(monkeypatch):
    monkeypatch.setenv("AGENT_NETWORKS_DENY", "169.254.0.0/16,not-a-network")
    with pytest.raises(ImproperlyConfigured, match="AGENT_NETWORKS_DENY"):
        env.env_networks("AGENT_NETWORKS_DENY", [])
    monkeypatch.setenv("AGENT_NETWORKS_DENY", "")
    assert env.env_networks("AGENT_NETWORKS_DENY", ["169.254.0.0/16"]) == []


# --- at connect time --------------------------------------------------------------------


def test_a_connection_test_checks_what_a_name_resolves_to(settings, recorder, dns):
    settings.AGENT_NETWORKS_DENY = ["127.0.0.1/32"]
    dns("agent.test", ["127.0.0.1"])
    port = recorder.url.rsplit(":", 1)[1]
    registration.register_node(name="gpu-n", agent_url=f"http://agent.test:{port}", token=TOKEN)
    result = connection_test.test_connection(f"http://agent.test:{port}", TOKEN)
    assert not result.ok and "agent.test" in result.error and "127.0.0.1" not in result.error
    assert recorder.requests == []


def test_a_dns_answer_that_changes_after_the_check_is_not_followed(settings, recorder, dns):
    # The first answers are allowed (127.0.0.2, where nothing listens); every later one
    # is the denied address where the recorder waits. A client that resolved the name
    # again to connect would reach it.
    settings.AGENT_NETWORKS_DENY = ["127.0.0.1/32"]
    settings.GPU_POLL_RETRIES = 2
    port = recorder.url.rsplit(":", 1)[1]
    lookups = dns("rebind.test", ["127.0.0.2", "127.0.0.2", "127.0.0.1"])
    result = connection_test.test_connection(f"http://rebind.test:{port}", TOKEN)
    assert not result.ok and "refused" in result.error, result  # by 127.0.0.2
    assert recorder.requests == []
    assert lookups == ["127.0.0.2", "127.0.0.2"]  # the check's, then the connection's


def test_the_poller_refuses_a_denied_address_and_resolves_a_name_once(settings, recorder, dns):
    port = recorder.url.rsplit(":", 1)[1]
    targets = [
        poller.AgentTarget(1, "http://169.254.169.254:80", TOKEN),
        poller.AgentTarget(2, f"http://[::ffff:169.254.169.254]:{port}", TOKEN),
    ]
    results = poller.poll(targets, timeout=2.0, concurrency=4)
    assert all("in a denied network" in r.error and r.duration_s < 0.5 for r in results), results
    # A node's name resolved to a denied address since it was registered.
    settings.AGENT_NETWORKS_DENY = ["127.0.0.1/32"]
    dns("moved.test", ["127.0.0.1"])
    [result] = poller.poll([poller.AgentTarget(3, f"http://moved.test:{port}", TOKEN)],
                           timeout=2.0, concurrency=1)  # fmt: skip
    assert "in a denied network" in result.error and recorder.requests == []


def test_a_pool_resolves_a_host_once_per_while_not_per_connection(recorder, dns):
    from agents import client as agent_client

    port = recorder.url.rsplit(":", 1)[1]
    lookups = dns("agent.test", ["127.0.0.1"])
    # The recorder speaks HTTP/1.0: each request takes a new connection.
    request = agent_client.Request("GET", f"http://agent.test:{port}/v1/snapshot", TOKEN)

    async def twice() -> list[agent_client.Response]:
        pool = agent_client.Pool()
        try:
            first = await pool.send_all([request], timeout=2.0, concurrency=1)
            second = await pool.send_all([request], timeout=2.0, concurrency=1)
        finally:
            pool.close()
        return first + second

    import asyncio

    responses = asyncio.run(twice())
    assert [r.status for r in responses] == [200, 200]
    assert len(recorder.requests) == 2 and lookups == ["127.0.0.1"]


# --- what a connection test tells ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "words"),
    [(401, "token"), (403, "403"), (404, "No agent"), (500, "500"), (302, "redirects"),
     (418, "418")],
)  # fmt: skip
def test_a_connection_test_never_echoes_the_answer(recorder, caplog, status, words):
    recorder.status, recorder.body = status, b"internal secret: db password is hunter2"
    with caplog.at_level(logging.INFO, logger="agents.connection_test"):
        result = connection_test.test_connection(recorder.url, TOKEN)
    assert not result.ok and words in result.error
    assert "hunter2" not in result.error
    assert "hunter2" in caplog.text  # for whoever runs the portal, in its log


def test_a_connection_test_of_the_portals_database_is_refused_without_connecting():
    host, port = _portal_services()[0]
    result = connection_test.test_connection(f"http://{host}:{port}", TOKEN)
    assert not result.ok and "own services" in result.error and result.latency_ms == 0


def test_a_connection_test_still_reaches_a_real_agent_on_loopback(sim_agents):
    agents = sim_agents(1, 1)
    assert connection_test.test_connection(agents.urls[0], agents.token).ok
