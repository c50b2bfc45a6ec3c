"""The one way channels speak HTTP: JSON posted with a timeout, answers read up to a
limit, redirects not followed (a robot URL that redirects is a misconfiguration, and
following it would let a user-provided URL lead anywhere), and addresses checked.

Channel URLs come from users. They must be https; plain http only to the hosts in
ALERT_HTTP_ALLOWED_HOSTS (loopback receivers in tests, an internal relay). The connection
goes through the outgoing-address policy (portal/egress.py): to an address checked against
ALERT_NETWORKS_DENY (loopback, link-local, where clouds serve instance metadata) and never
to the portal's own database or Redis, the name resolved once, so a DNS answer that changes
after the check is not followed. The allowed hosts skip the network list, not the services.

What a refused endpoint answers is logged, never shown: a channel page that echoed it would
let its owner read whatever the URL reaches.
"""

from __future__ import annotations

import http.client
import json
import logging
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.translation import gettext as _

from alerts.transports.base import TransportError
from portal import egress

log = logging.getLogger(__name__)

ANSWER_MAX_BYTES = 64 * 1024
URL_MAX_CHARS = 2048
USER_AGENT = "GPU-Portal-Alerts/1"


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def allowed_http_host(host: str) -> bool:
    return host.lower() in {h.lower() for h in settings.ALERT_HTTP_ALLOWED_HOSTS}


def check_url(url: str, *, path_prefix: str = "", query_key: str = "") -> str:
    """A channel URL fit to store, or ValidationError. ``path_prefix`` and ``query_key``
    state a vendor's shape (WeCom's ``?key=``) without pinning its host: private
    deployments of these services have their own."""
    if len(url) > URL_MAX_CHARS:
        raise ValidationError(_("At most %(n)s characters.") % {"n": URL_MAX_CHARS})
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise ValidationError(_("Enter a full https:// URL."))
    if parts.scheme == "http" and not allowed_http_host(host):
        raise ValidationError(_("Only https:// URLs are accepted."))
    if parts.username or parts.password:
        raise ValidationError(_("A URL may not carry a user name or password."))
    if any(ch in url for ch in "\r\n\t "):
        raise ValidationError(_("A URL may not contain spaces or line breaks."))
    if path_prefix and not parts.path.startswith(path_prefix):
        raise ValidationError(_("The path should start with %(path)s.") % {"path": path_prefix})
    if query_key and not urllib.parse.parse_qs(parts.query).get(query_key):
        raise ValidationError(_("The URL lacks its %(key)s= parameter.") % {"key": query_key})
    if (refused := refusal(url)) is not None:
        raise ValidationError(refused)
    return url


_policies: dict[bool, egress.AddressPolicy] = {}  # built once: it resolves service names


@receiver(setting_changed)
def _forget_policies(setting: str, **kwargs) -> None:
    if setting in ("ALERT_NETWORKS_DENY", "DATABASES", "REDIS_URL"):
        _policies.clear()


def policy_for(host: str) -> egress.AddressPolicy:
    """The outgoing-address policy for a channel's host: the denied networks and the
    portal's services; for the allowed hosts (a relay, a test's loopback receiver) the
    portal's services alone."""
    exempt = allowed_http_host(host)
    if exempt not in _policies:
        deny = () if exempt else settings.ALERT_NETWORKS_DENY
        _policies[exempt] = egress.build_policy((), deny, egress.portal_services())
    return _policies[exempt]


def refusal(url: str) -> str | None:
    """Why the portal will not post to ``url``'s host, judged now by its literal address
    (or localhost); None otherwise: names are checked when they are resolved, at send."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    refused = egress.literal_refusal(host, _port(parts), policy_for(host))
    return None if refused is None else explain(refused, host)


def explain(refused: egress.AddressRefused, host: str) -> str:
    """What the channel's owner reads: the host they typed, not what it resolved to."""
    if refused.reason == "service":
        return _("%(host)s port %(port)s is one of the portal's own services.") % {
            "host": host, "port": refused.port}  # fmt: skip
    return _("%(host)s is in a network alerts may not reach.") % {"host": host}


def _port(parts: urllib.parse.SplitResult) -> int:
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:  # a port out of range, as urllib says
        return 0


class _CheckedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address the policy checked (portal/egress.py), not to a name."""

    def __init__(self, host: str, port: int, *, policy: egress.AddressPolicy, timeout: float):
        super().__init__(host, port, timeout=timeout)
        self.policy = policy

    def connect(self) -> None:
        self.sock = egress.connect(self.host, self.port, self.policy, self.timeout)


class _CheckedHTTPSConnection(_CheckedHTTPConnection):
    default_port = 443
    context = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        # The certificate is checked against the host typed, not the address connected to.
        self.sock = self.context.wrap_socket(self.sock, server_hostname=self.host)


def post(url: str, body: bytes, headers: Mapping[str, str] | None = None) -> Answer:
    """POST ``body``; the answer whatever its status (a redirect included: not followed).
    A refused address raises a permanent TransportError; refused connections, timeouts and
    resets a transient one."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise TransportError(_("Enter a full https:// URL."), permanent=True)
    if parts.scheme == "http" and not allowed_http_host(host):
        raise TransportError(_("Only https:// URLs are accepted."), permanent=True)
    kind = _CheckedHTTPSConnection if parts.scheme == "https" else _CheckedHTTPConnection
    connection = kind(host, _port(parts), policy=policy_for(host),
                      timeout=settings.ALERT_HTTP_TIMEOUT)  # fmt: skip
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    sent = {"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT,
            **(headers or {})}  # fmt: skip
    try:
        connection.request("POST", target, body=body, headers=sent)
        response = connection.getresponse()
        return Answer(response.status, response.read(ANSWER_MAX_BYTES))
    except egress.AddressRefused as refused:
        raise TransportError(explain(refused, host), permanent=True) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc.__class__.__name__
        if isinstance(exc, OSError) and exc.strerror:
            reason = exc.strerror
        raise TransportError(_("Cannot reach %(host)s: %(error)s") % {
            "host": host, "error": reason}) from None  # fmt: skip
    finally:
        connection.close()


def post_json(url: str, payload: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return post(url, json.dumps(payload, ensure_ascii=False).encode(), headers)


def raise_for_status(answer: Answer) -> None:
    """2xx passes. 408, 429 and 5xx are worth retrying; any other status (a redirect, a
    4xx such as a revoked key) will not change by itself and is permanent. The body is
    logged, not repeated (module docstring)."""
    if 200 <= answer.status < 300:
        return
    transient = answer.status in (408, 425, 429) or answer.status >= 500
    log.info("channel endpoint answered HTTP %s: %r", answer.status, answer.body[:300])
    raise TransportError(
        _("The endpoint answered HTTP %(status)s.") % {"status": answer.status},
        permanent=not transient,
    )


def vendor_code(answer: Answer, *keys: str) -> int | None:
    """The error code an IM vendor returns inside an HTTP 200 answer; None when the
    answer carries none (it is not the vendor's)."""
    data = answer.json()
    if not isinstance(data, dict):
        return None
    for key in keys:
        if key in data:
            try:
                return int(data[key])
            except (TypeError, ValueError):
                return None
    return None
