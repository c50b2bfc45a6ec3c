"""Which addresses the portal may open a connection to for an agent.

An agent URL is typed by whoever may add nodes, so without a rule the portal would connect
wherever it is told: to the cloud's metadata service (169.254.169.254), or to its own
database and Redis. A policy holds the networks allowed (empty: any), the networks denied
and the portal's own services (address and port); the client (agents/fanout.py) checks
every address a host name resolves to and connects only to those it checked, so a DNS
answer that changes between the check and the connection cannot slip through.

No Django here: agents/networks.py builds the policy from the settings.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressRefused(Exception):
    """The host is, or resolves to, an address agents may not have; ``reason`` says why:
    ``outside`` the allowed networks, in a ``denied`` one, or a portal ``service``."""

    _TEXTS = {
        "outside": "{address} is outside the networks allowed for agents",
        "denied": "{address} is in a network denied to agents",
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


PolicySource = Callable[[], AddressPolicy | None]
_default_policy: PolicySource | None = None


def set_default_policy(source: PolicySource | None) -> None:
    """The policy of every resolver not given its own. The portal sets it at start
    (agents.apps), so the poller's pools and the connection test's apply it alike."""
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
