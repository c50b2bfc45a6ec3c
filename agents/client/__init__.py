"""The client that speaks to node agents: many at once from one event loop (``Pool``),
or one from synchronous code (``send``). What other modules use of it is named here;
its modules are its own business:

- ``pool``: keep-alive connections and prepared requests, and ``send``;
- ``batch``: one fan-out call, its concurrency, timers, retries;
- ``connection``: one keep-alive connection (an ``asyncio.Protocol``);
- ``framing``: HTTP/1.1 on the wire, answers framed by llhttp;
- ``messages``: ``Request`` and ``Response``;
- ``contract``: how the pool, a batch and a connection see each other.
"""

from agents.client.messages import Request, Response
from agents.client.pool import MAX_BODY_BYTES, Pool, send

__all__ = ["MAX_BODY_BYTES", "Pool", "Request", "Response", "send"]
