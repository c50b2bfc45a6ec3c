"""How the agent client's parts see each other: one small Protocol per role.

The pool (``pool.Pool``), a batch of requests (``batch.Batch``) and a connection
(``connection.Connection``) each know the others only as these, so each can change its
insides without the others noticing, and none reaches into another's private members.

    Pool (LinkOwner, Links) ──runs──> Batch (Sender) ──sends on──> Connection (Link)

A connection tells its owner when it is open, free again or gone, and the batch that sent
on it the answer or what went wrong; a batch asks the pool for a connection.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

from agents.client.framing import Origin, Target


class InFlight(Protocol):
    """One request in flight: what to write, and the connection carrying it (or None)."""

    target: Target
    connection: Link | None


# A connection hands back the very exchange it was given, so a sender may take its own kind.
E = TypeVar("E", bound=InFlight)
E_contra = TypeVar("E_contra", bound=InFlight, contravariant=True)


class Sender(Protocol[E_contra]):
    """Who sent the request: given its answer, or what went wrong (``retry``: it may be sent
    again; ``stale``: a reused connection lost it before any byte of the answer)."""

    max_body: int

    def answered(self, exchange: E_contra, status: int, body: bytes) -> None: ...

    def failed(
        self, exchange: E_contra, error: str, *, retry: bool, stale: bool = False
    ) -> None: ...


class Link(Protocol):
    """One keep-alive connection to one origin, carrying one request at a time."""

    origin: Origin
    idle_since: float  # the owner's loop time when it was last given back

    def usable(self) -> bool: ...

    def send(self, sender: Sender[E], exchange: E) -> None: ...

    def abandon(self) -> None:
        """Drop the connection and whatever it carries, with no callback."""
        ...

    def close(self, abort: bool = False) -> None: ...


class LinkOwner(Protocol):
    """Where a connection belongs: told when it is open, free for the next request, gone."""

    def opened(self, link: Link) -> None: ...

    def checkin(self, link: Link) -> None: ...

    def forget(self, link: Link) -> None: ...


class Links(LinkOwner, Protocol):
    """The pool as a batch uses it: an idle connection to an origin, or a new one."""

    def checkout(self, origin: Origin) -> Link | None: ...

    async def connect(self, origin: Origin) -> Link:
        """A new connection; raises AddressRefused (portal.egress), ssl.SSLError,
        socket.gaierror, OSError or UnicodeError (a host name IDNA refuses)."""
        ...
