"""Where the portal may open an outgoing connection: one policy for agents and alert
channels (docs/security.md, "Outgoing connections").

Agent URLs and channel URLs are typed by people, so without a rule the portal would connect
wherever it is told: to the cloud's metadata service (169.254.169.254), or to its own
database and Redis. A policy holds the networks allowed (empty: any), the networks denied
and the portal's own services (address and port). Every client checks every address a
host name resolves to and connects only to an address it checked (``Resolver`` for the
asyncio agent client, ``connect`` for synchronous code), so a DNS answer that changes
between the check and the connection (DNS rebinding) cannot slip through.

Each purpose builds its policy from its own settings (agents/networks.py, alerts'
transports/http.py) with ``build_policy`` and ``portal_services``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressRefused(Exception):
    """The host is, or resolves to, an address the policy refuses; ``reason`` says why:
    ``outside`` the allowed networks, in a ``denied`` one, or a portal ``service``."""

    _TEXTS = {
        "outside": "{address} is outside the networks allowed",
        "denied": "{address} is in a denied network",
        "service": "{address} port {port} is one of the portal's own services",
    }

    def __init__(self, reason: str, address: IPAddress, port: int) -> None:
        super().__init__(self._TEXTS[reason].format(address=address, port=port))
        self.reason, self.address, self.port = reason, address, port


@dataclass(frozen=True)
class AddressPolicy:
    allow: tuple[IPNetwork, ...] = ()  # empty: every network not denied
    deny: tuple[IPNetwork, ...] = ()
    services: frozenset[tuple[IPAddress, int]] = frozenset()  # the portal's own
    # Ports of services on this host: they answer on every loopback and "any" address.
    local_service_ports: frozenset[int] = frozenset()

    def refusal(self, address: str | IPAddress, port: int) -> AddressRefused | None:
        """Why the portal may not connect to ``address`` on ``port``; None if it may."""
        ip = ipaddress.ip_address(address) if isinstance(address, str) else address
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped  # ::ffff:169.254.169.254 is 169.254.169.254
        if self.allow and not any(ip in network for network in self.allow):
            return AddressRefused("outside", ip, port)
        if any(ip in network for network in self.deny):
            return AddressRefused("denied", ip, port)
        if (ip, port) in self.services or (
            port in self.local_service_ports and (ip.is_loopback or ip.is_unspecified)
        ):
            return AddressRefused("service", ip, port)
        return None

    def check(self, addresses: Iterable[str], port: int) -> list[str]:
        """The addresses, in order and once each, if every one of them is allowed."""
        checked: list[str] = []
        for address in addresses:
            if address in checked:
                continue
            if (refused := self.refusal(address, port)) is not None:
                raise refused
            checked.append(address)
        return checked


def literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def resolve(
    loop: asyncio.AbstractEventLoop, host: str, port: int, policy: AddressPolicy
) -> list[str]:
    """The checked addresses of ``host``: every one it resolves to, or AddressRefused.

    Raises socket.gaierror (or UnicodeError for a name IDNA cannot encode) as
    ``loop.create_connection`` would.
    """
    if literal(host) is not None:
        return policy.check([host], port)
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return policy.check([info[4][0] for info in infos], port)


def resolve_now(host: str, port: int, policy: AddressPolicy) -> list[str]:
    """``resolve`` for synchronous code (a form check before a connection test)."""
    if literal(host) is not None:
        return policy.check([host], port)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return policy.check([info[4][0] for info in infos], port)


def literal_refusal(host: str, port: int, policy: AddressPolicy) -> AddressRefused | None:
    """Why ``host`` is refused before any lookup: judged by the address it names (or
    localhost's); None when it names neither, a name being checked when it is resolved."""
    lowered = host.lower()
    if lowered == "localhost" or lowered.endswith(".localhost"):
        addresses = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    else:
        addresses = [address] if (address := literal(host)) is not None else []
    for address in addresses:
        if (refused := policy.refusal(address, port)) is not None:
            return refused
    return None


def connect(host: str, port: int, policy: AddressPolicy | None, timeout: float) -> socket.socket:
    """A TCP connection to ``host``, made to one of the addresses the policy checked (the
    first that answers), never to a name resolved again; no policy: to ``host`` as is.
    Raises AddressRefused, socket.gaierror or OSError."""
    if policy is None:
        return socket.create_connection((host, port), timeout=timeout)
    error: OSError | None = None
    for address in resolve_now(host, port, policy):
        try:
            return socket.create_connection((address, port), timeout=timeout)
        except OSError as exc:
            error = exc
    raise error or OSError(f"no address for {host}")


def build_policy(
    allow: Iterable[str | IPNetwork],
    deny: Iterable[str | IPNetwork],
    services: Iterable[tuple[str, int]],
) -> AddressPolicy:
    """A policy from CIDR lists and the (host, port) services to keep off, their host
    names resolved now."""
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


def portal_services() -> list[tuple[str, int]]:
    """The portal's own TCP services, refused to every purpose: its PostgreSQL and Redis."""
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
        log.warning("cannot resolve %s to keep outgoing connections off it: %s", host, exc)
        return []
    return [ipaddress.ip_address(info[4][0]) for info in infos]


PolicySource = Callable[[], AddressPolicy | None]
_default_policy: PolicySource | None = None


def set_default_policy(source: PolicySource | None) -> None:
    """The policy of every resolver not given its own. The portal sets it at start to the
    agents' (agents.apps), so the poller's pools and the connection test's apply it alike."""
    global _default_policy
    _default_policy = source


# A host's checked addresses are reused this long: a poller's new connections then cost
# no DNS lookup, and a changed DNS answer is checked again within this time.
RESOLVED_TTL_S = 30.0
_RESOLVED_MAX = 100_000


class Resolver:
    """A pool's view of where hosts are: checked addresses per (host, port), cached."""

    def __init__(self, policy: PolicySource | None = None) -> None:
        self._policy = policy
        # (host, port) -> (policy, until, checked addresses or why they are refused)
        self._found: dict[
            tuple[str, int], tuple[AddressPolicy, float, list[str] | AddressRefused]
        ] = {}

    async def addresses(self, host: str, port: int) -> list[str]:
        """Where to connect for ``host``: its checked addresses, or the host itself (for
        asyncio to resolve) when no policy applies. Raises AddressRefused."""
        source = self._policy or _default_policy
        policy = source() if source is not None else None
        if policy is None:
            return [host]
        loop = asyncio.get_running_loop()
        now = loop.time()
        cached = self._found.get((host, port))
        if cached is not None and cached[0] is policy and cached[1] > now:
            found = cached[2]
        else:
            try:
                found = await resolve(loop, host, port, policy)
            except AddressRefused as exc:
                found = exc
            if len(self._found) >= _RESOLVED_MAX:
                self._found.clear()
            self._found[(host, port)] = (policy, now + RESOLVED_TTL_S, found)
        if isinstance(found, AddressRefused):  # a fresh one: a raise extends a traceback
            raise AddressRefused(found.reason, found.address, found.port)
        return found
