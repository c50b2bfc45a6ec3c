"""Where agents may be: the settings' allowed and denied networks, applied at registration
(an address in the URL) and at every connection (agents/address_policy.py, through the
pools of agents/fanout.py: the poller's and the connection test's).

``AGENT_NETWORKS_ALLOW`` (empty: any) and ``AGENT_NETWORKS_DENY`` (by default link-local,
where clouds serve instance metadata) are CIDR lists; the portal's own database and Redis
are always denied. A host name is checked when it is resolved, not when it is registered:
an inventory may be imported before its names are in DNS, and DNS can change.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.translation import gettext as _

from agents.address_policy import AddressPolicy, AddressRefused, IPAddress, literal, resolve_now

log = logging.getLogger(__name__)

_SETTINGS = ("AGENT_NETWORKS_ALLOW", "AGENT_NETWORKS_DENY", "DATABASES", "REDIS_URL")
_policy: AddressPolicy | None = None


def policy() -> AddressPolicy:
    """The policy from the settings, built once (resolving the services' host names)."""
    global _policy
    if _policy is None:
        _policy = build_policy(
            settings.AGENT_NETWORKS_ALLOW, settings.AGENT_NETWORKS_DENY, _services()
        )
    return _policy


@receiver(setting_changed)
def _forget_policy(setting: str, **kwargs) -> None:
    global _policy
    if setting in _SETTINGS:
        _policy = None


def build_policy(
    allow: Iterable[str], deny: Iterable[str], services: Iterable[tuple[str, int]]
) -> AddressPolicy:
    endpoints: set[tuple[IPAddress, int]] = set()
    for host, port in services:
        for address in _addresses(host, port):
            endpoints.add((address, port))
    local = {port for address, port in endpoints if address.is_loopback or address.is_unspecified}
    return AddressPolicy(
        allow=tuple(ipaddress.ip_network(cidr, strict=False) for cidr in allow),
        deny=tuple(ipaddress.ip_network(cidr, strict=False) for cidr in deny),
        services=frozenset(endpoints),
        local_service_ports=frozenset(local),
    )


def _services() -> list[tuple[str, int]]:
    """The portal's own TCP services: its PostgreSQL and its Redis."""
    found = []
    database = settings.DATABASES["default"]
    host = database.get("HOST") or "localhost"  # empty: a local socket, and likely 5432
    if not host.startswith("/"):
        found.append((host, int(database.get("PORT") or 5432)))
    if settings.REDIS_URL:
        parts = urlsplit(settings.REDIS_URL)
        if parts.scheme in ("redis", "rediss") and parts.hostname:
            found.append((parts.hostname, parts.port or 6379))
    return found


def _addresses(host: str, port: int) -> list[IPAddress]:
    if (address := literal(host)) is not None:
        return [address]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        log.warning("cannot resolve %s to keep agents off it: %s", host, exc)
        return []
    return [ipaddress.ip_address(info[4][0]) for info in infos]


def _host_and_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def explain(refused: AddressRefused, host: str) -> str:
    """What to tell the person who typed the URL (its host, never what a name resolved to)."""
    texts = {
        "outside": _("%(host)s is outside the networks allowed for agents."),
        "denied": _("%(host)s is in a network the portal never connects to for agents."),
        "service": _("%(host)s port %(port)s is one of the portal's own services."),
    }
    return texts[refused.reason] % {"host": host, "port": refused.port}


def url_refusal(url: str) -> str | None:
    """At registration: why an agent URL may not be used, judged by its address if it
    names one (or localhost); None if it may, host names being checked at connect time."""
    host, port = _host_and_port(url)
    addresses = [literal(host)]
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        addresses = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    for address in addresses:
        if address is not None and (refused := policy().refusal(address, port)) is not None:
            return explain(refused, host)
    return None


def connect_refusal(url: str) -> str | None:
    """Before a connection test: the host's addresses now, resolved and checked, so that the
    person gets a clear reason. The connection itself checks again (agents/fanout.py)."""
    host, port = _host_and_port(url)
    try:
        resolve_now(host, port, policy())
    except AddressRefused as refused:
        return explain(refused, host)
    except (OSError, UnicodeError):
        return None  # the connection test reports the name that does not resolve
    return None
