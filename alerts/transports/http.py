"""The one way channels speak HTTP: JSON posted with a timeout, answers read up to a
limit, redirects refused (a robot URL that redirects is a misconfiguration, and following
it would let a user-provided URL lead anywhere), and addresses checked.

Channel URLs come from users. They must be https; plain http only to the hosts in
ALERT_HTTP_ALLOWED_HOSTS (loopback receivers in tests, an internal relay). A host that
resolves into ALERT_NETWORKS_DENY (loopback, link-local, where clouds serve instance
metadata) is refused unless it is one of those allowed hosts.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from alerts.transports.base import TransportError

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

    def text(self, limit: int = 300) -> str:
        return self.body[:limit].decode("utf-8", "replace")


def _allowed_http_host(host: str) -> bool:
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
    if parts.scheme == "http" and not _allowed_http_host(host):
        raise ValidationError(_("Only https:// URLs are accepted."))
    if parts.username or parts.password:
        raise ValidationError(_("A URL may not carry a user name or password."))
    if any(ch in url for ch in "\r\n\t "):
        raise ValidationError(_("A URL may not contain spaces or line breaks."))
    if path_prefix and not parts.path.startswith(path_prefix):
        raise ValidationError(_("The path should start with %(path)s.") % {"path": path_prefix})
    if query_key and not urllib.parse.parse_qs(parts.query).get(query_key):
        raise ValidationError(_("The URL lacks its %(key)s= parameter.") % {"key": query_key})
    return url


def _check_address(host: str, port: int) -> None:
    if _allowed_http_host(host):
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise TransportError(_("Cannot resolve %(host)s: %(error)s") % {
            "host": host, "error": exc}) from None  # fmt: skip
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if any(address in network for network in settings.ALERT_NETWORKS_DENY):
            raise TransportError(
                _("%(host)s resolves to %(address)s, a network alerts may not reach.")
                % {"host": host, "address": address},
                permanent=True,
            )


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # urllib then raises HTTPError with the 3xx status


_opener = urllib.request.build_opener(_NoRedirects)


def post(url: str, body: bytes, headers: Mapping[str, str] | None = None) -> Answer:
    """POST ``body``; the answer whatever its status. Refused connections, timeouts and
    resets raise a transient TransportError."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "http" and not _allowed_http_host(parts.hostname or ""):
        raise TransportError(_("Only https:// URLs are accepted."), permanent=True)
    _check_address(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310 (checked)
    request.add_header("Content-Type", "application/json; charset=utf-8")
    request.add_header("User-Agent", USER_AGENT)
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with _opener.open(request, timeout=settings.ALERT_HTTP_TIMEOUT) as response:
            return Answer(response.status, response.read(ANSWER_MAX_BYTES))
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read(ANSWER_MAX_BYTES)
        except OSError:
            body = b""
        return Answer(exc.code, body)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransportError(_("Cannot reach %(host)s: %(error)s") % {
            "host": parts.hostname, "error": reason}) from None  # fmt: skip


def post_json(url: str, payload: Any, headers: Mapping[str, str] | None = None) -> Answer:
    return post(url, json.dumps(payload, ensure_ascii=False).encode(), headers)


def raise_for_status(answer: Answer) -> None:
    """2xx passes. 408, 429 and 5xx are worth retrying; any other status (a redirect, a
    4xx such as a revoked key) will not change by itself and is permanent."""
    if 200 <= answer.status < 300:
        return
    transient = answer.status in (408, 425, 429) or answer.status >= 500
    raise TransportError(
        _("HTTP %(status)s: %(body)s") % {"status": answer.status, "body": answer.text()},
        permanent=not transient,
    )


def vendor_code(answer: Answer, *keys: str) -> tuple[int | None, str]:
    """The error code and message an IM vendor returns inside an HTTP 200 answer."""
    data = answer.json()
    if not isinstance(data, dict):
        return None, answer.text()
    for key in keys:
        if key in data:
            try:
                code = int(data[key])
            except (TypeError, ValueError):
                return None, answer.text()
            text = data.get("errmsg") or data.get("msg") or data.get("StatusMessage") or ""
            return code, str(text)[:300]
    return None, answer.text()
