"""The embedded demo's alerting: the admin's email and webhook channels subscribed to
every rule, a webhook receiver on loopback that prints what it gets, and mail printed
on the console unless an SMTP server is configured. With the demo's "demo-hot" node
(the simulator's hot scenario) a card overheats a minute after start, fires "GPU
temperature above 85 °C for 5 minutes" about five minutes later (one email, one webhook
call) and resolves when it cools (one of each again)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.conf import settings
from django.db import transaction

from alerts.choices import ChannelKind, Severity
from alerts.models import Channel, Subscription
from alerts.services import create_channel

EMAIL_NAME, WEBHOOK_NAME = "Demo email", "Demo webhook"


class _Printer(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        body = self.rfile.read(length)
        try:
            title = json.loads(body).get("title", "")
        except ValueError:
            title = "(not JSON)"
        print(f"demo webhook received: {title}", flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        return


def start_receiver(host: str = "127.0.0.1") -> str:
    """A webhook receiver in a daemon thread; its URL."""
    server = ThreadingHTTPServer((host, 0), _Printer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{host}:{server.server_address[1]}/hook"


@transaction.atomic
def seed(admin, *, webhook_url: str, email: str = "admin@localhost", secret: str = "") -> list[int]:
    """The admin's two demo channels (the webhook's URL updated to this run's receiver),
    each subscribed to every rule from warnings up. Their ids."""
    if "127.0.0.1" not in settings.ALERT_HTTP_ALLOWED_HOSTS:
        settings.ALERT_HTTP_ALLOWED_HOSTS = [*settings.ALERT_HTTP_ALLOWED_HOSTS, "127.0.0.1"]
    Channel.objects.filter(owner=admin, name=WEBHOOK_NAME).delete()
    values = {"url": webhook_url, "secret": secret}
    ids = [create_channel(actor=None, address=None, name=WEBHOOK_NAME, kind=ChannelKind.WEBHOOK,
                          settings_values=values, owner_id=admin.pk)]  # fmt: skip
    email_channel = Channel.objects.filter(owner=admin, name=EMAIL_NAME).first()
    if email_channel is None:
        ids.append(create_channel(actor=None, address=None, name=EMAIL_NAME,
                                  kind=ChannelKind.EMAIL, settings_values={"address": email},
                                  owner_id=admin.pk))  # fmt: skip
    else:
        ids.append(email_channel.pk)
    for channel_id in ids:
        Subscription.objects.get_or_create(
            owner=admin, channel_id=channel_id, defaults={"min_severity": Severity.WARNING}
        )
    return ids
