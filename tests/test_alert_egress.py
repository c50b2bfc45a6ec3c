"""Alert channels go out through the one outgoing-address policy (portal/egress.py): a
name is resolved once and the connection goes to the address that was checked; denied
networks and the portal's own services are refused at save and at send; what a refusing
endpoint answers is never shown; and only platform admins (or holders of the permission)
point a channel at a host of their choosing."""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Permission
from django.utils import timezone

from alerts import outbox
from alerts.choices import ChannelKind
from alerts.models import Channel, Delivery
from alerts.transports import http
from alerts.transports.base import TransportError
from quotas.choices import Role
from tests import clients
from tests.api import error_fields
from tests.factories import ChannelFactory, MembershipFactory, TenantFactory, UserFactory

URL = "/api/v1/alert-channels/"
SECRET_PAGE = b"internal-admin-page: db password is hunter2"


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A bare TCP listener on 127.0.0.1: its port and the peers it accepted."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer[0])
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def refusing() -> Iterator[str]:
    """An endpoint on loopback that answers 403 with a page it should not show."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(403)
            self.send_header("Content-Length", str(len(SECRET_PAGE)))
            self.end_headers()
            self.wfile.write(SECRET_PAGE)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def test_a_name_is_resolved_once_and_the_connection_goes_to_the_checked_address(
    settings, dns, listener
):
    # The name answers an allowed address first and a denied one after: a client that
    # resolved again to connect (DNS rebinding) would land on the second.
    settings.ALERT_NETWORKS_DENY = [ipaddress.ip_network("127.0.0.2/32")]
    port, accepted = listener
    lookups = dns("rebind.test", ["127.0.0.1", "127.0.0.2"])
    with pytest.raises(TransportError):  # the listener speaks no TLS
        http.post(f"https://rebind.test:{port}/hook", b"{}")
    assert lookups == ["127.0.0.1"] and accepted == ["127.0.0.1"]


def test_a_name_resolving_into_a_denied_network_is_refused_without_a_connection(
    settings, dns, listener
):
    settings.ALERT_NETWORKS_DENY = [ipaddress.ip_network("127.0.0.0/8")]
    port, accepted = listener
    dns("metadata.test", ["127.0.0.1"])
    with pytest.raises(TransportError) as refused:
        http.post(f"https://metadata.test:{port}/hook", b"{}")
    assert refused.value.permanent and accepted == []
    assert "metadata.test" in str(refused.value) and "127.0.0.1" not in str(refused.value)


def test_the_portals_own_redis_is_refused_even_to_an_allowed_host(settings):
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]  # skips the denied networks...
    redis_port = urlsplit(settings.REDIS_URL).port or 6379
    with pytest.raises(TransportError) as refused:  # ...not the portal's services
        http.post(f"http://127.0.0.1:{redis_port}/", b"{}")
    assert refused.value.permanent and "own services" in str(refused.value)


@pytest.mark.parametrize(
    "url",
    ["https://169.254.169.254/latest/meta-data", "https://[::ffff:169.254.169.254]/x",
     "https://localhost/hook", "https://127.0.0.1:8443/hook"],
)  # fmt: skip
def test_a_denied_address_in_the_url_is_400_at_save_and_changes_nothing(alice, url):
    response = clients.api(alice).post(
        URL, {"name": "meta", "kind": "webhook", "settings": {"url": url}}, format="json"
    )
    assert response.status_code == 400, response.content
    assert "url" in str(error_fields(response)) and not Channel.objects.exists()


def test_what_a_refusing_endpoint_answers_is_never_shown(client, settings, bob, refusing):
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    channel = ChannelFactory(owner=bob, kind=ChannelKind.SLACK, secrets={"url": refusing})
    delivery = Delivery.objects.create(channel=channel, next_attempt_at=timezone.now(), test=True)
    outbox.deliver(delivery.pk)
    delivery.refresh_from_db()
    assert "403" in delivery.last_error and "hunter2" not in delivery.last_error
    client.force_login(bob)
    page = client.get(f"/alerts/channels/{channel.pk}/")
    assert page.status_code == 200 and b"403" in page.content and b"hunter2" not in page.content
    deliveries = clients.api(bob).get(f"{URL}{channel.pk}/deliveries/")
    assert deliveries.status_code == 200 and b"hunter2" not in deliveries.content


RELAY = "https://relay.corp.example/alerts"


def test_a_member_may_use_a_vendors_public_host_but_not_a_host_of_their_choosing(bob):
    slack = {"name": "mine", "kind": "slack",
             "settings": {"url": "https://hooks.slack.com/services/T0/B0/x"}}  # fmt: skip
    assert clients.api(bob).post(URL, slack, format="json").status_code == 201
    before = list(Channel.objects.values())
    for kind in ("webhook", "slack"):
        body = {"name": "relay", "kind": kind, "settings": {"url": RELAY}}
        response = clients.api(bob).post(URL, body, format="json")
        assert response.status_code == 400, response.content
        assert "platform admin" in str(error_fields(response))
    assert list(Channel.objects.values()) == before


def test_platform_admins_permission_holders_and_open_hosts_may_use_any_host(alice, bob, settings):
    body = {"name": "relay", "kind": "webhook", "settings": {"url": RELAY}}
    assert clients.api(alice).post(URL, body, format="json").status_code == 201
    holder = UserFactory(username="relay-owner")
    holder.user_permissions.add(Permission.objects.get(codename="post_to_any_host"))
    assert clients.api(holder).post(URL, body, format="json").status_code == 201
    settings.ALERT_OPEN_HOSTS = ["relay.corp.example"]
    assert clients.api(bob).post(URL, body, format="json").status_code == 201


def test_a_tenant_admin_keeps_a_channel_the_platform_admin_pointed_elsewhere(alice, bob):
    tenant = TenantFactory()
    MembershipFactory(tenant=tenant, user=bob, role=Role.ADMIN)
    body = {"name": "team relay", "kind": "webhook", "tenant": tenant.pk,
            "settings": {"url": RELAY}}  # fmt: skip
    created = clients.api(alice).post(URL, body, format="json")
    assert created.status_code == 201, created.content
    channel_url = f"{URL}{created.json()['id']}/"
    renamed = clients.api(bob).patch(channel_url, {"name": "team relay 2"}, format="json")
    assert renamed.status_code == 200, renamed.content
    moved = clients.api(bob).patch(
        channel_url, {"settings": {"url": "https://other.corp.example/x"}}, format="json"
    )
    assert moved.status_code == 400
    assert Channel.objects.get().secrets["url"] == RELAY
