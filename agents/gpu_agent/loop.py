"""One thread, one asyncio loop, every node this process serves (``server.py``'s HTTP).

A real node (NVML) is one ``Collector``, whose own thread reads the cards every
interval whether or not anyone asks (the point on a GPU node). The simulator's nodes
are ``LazyNode``s that collect only when asked (``lazy.py``): ``--nodes 1000`` used to
start a threading HTTP server and a collector thread per node, 2,000 threads that kept
two cores busy with nobody asking; here an idle fleet sleeps in ``epoll_wait`` and a
polled node costs one collection per interval. Each node is a listening socket in one
selector. SIGTERM and SIGINT stop the loop at once.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from agents.gpu_agent.backends.base import Backend
from agents.gpu_agent.server import IDLE_TIMEOUT_S, AgentProtocol, ServedNode, Site

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 10.0  # how often idle keep-alive connections are looked for
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest(Protocol):
    """Set by the CLI's signal handler before the loop runs (see ``cli.StopFlag``)."""

    requested: bool


class Node(ServedNode, Protocol):
    """A ``Collector`` or a ``LazyNode``: what is served, and what the start-up line names."""

    backend: Backend

    def gpu_count(self) -> int | None: ...


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _raise_open_file_limit(wanted: int) -> None:
    # A listening socket per node plus a connection per node from the portal: 1,000 nodes
    # need ~2,000 descriptors, more than the usual soft limit of 1,024.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open file limit to %d: %s", target, exc)


def serve_nodes(
    nodes: Sequence[Node],
    host: str,
    port: int,
    token: str | None,
    metrics_auth: bool,
    stop: StopRequest,
) -> int:
    """Serve node i on ``port + i`` (or any free port when ``port`` is 0) until a signal.

    Returns the exit code: 0 after SIGTERM/SIGINT, 1 when a port cannot be bound.
    """
    _raise_open_file_limit(2 * len(nodes) + 64)
    # The loop resets the handlers it installed to the defaults when it closes; put the
    # caller's back, so a second SIGTERM during clean-up cannot kill the process mid-way.
    previous = {signum: signal.getsignal(signum) for signum in _SIGNALS}
    try:
        return asyncio.run(_serve(nodes, host, port, token, metrics_auth, stop))
    finally:
        if threading.current_thread() is threading.main_thread():
            for signum, handler in previous.items():
                signal.signal(signum, handler)


async def _serve(
    nodes: Sequence[Node],
    host: str,
    port: int,
    token: str | None,
    metrics_auth: bool,
    stop: StopRequest,
) -> int:
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    # Signal handlers can only be installed from the main thread; tests may call main()
    # from another, and then stop it by other means.
    on_main_thread = threading.current_thread() is threading.main_thread()
    if on_main_thread:
        for signum in _SIGNALS:
            loop.add_signal_handler(signum, stopped.set)
    if stop.requested:  # a signal arrived while the nodes were being built
        stopped.set()
    connections: set[AgentProtocol] = set()
    servers: list[asyncio.Server] = []
    sweeper: asyncio.TimerHandle | None = None

    def sweep() -> None:
        nonlocal sweeper
        cutoff = time.monotonic() - IDLE_TIMEOUT_S
        for connection in [c for c in connections if c.last_active < cutoff]:
            connection.close()
        sweeper = loop.call_later(SWEEP_EVERY_S, sweep)

    try:
        for i, node in enumerate(nodes):
            if stopped.is_set():
                break
            site = Site(node, token, metrics_auth)
            address = port + i if port else 0  # port 0: a free port per node, for tests
            try:
                server = await loop.create_server(
                    lambda site=site: AgentProtocol(site, connections),  # type: ignore[misc]
                    host,
                    address,
                    reuse_address=True,
                )
            except OSError as exc:
                print(f"gpu-agent: cannot listen on {host}:{address}: {exc}", file=sys.stderr)
                return 1
            servers.append(server)
            bound = server.sockets[0].getsockname()[1]
            gpus = node.gpu_count()
            # Printed once the port accepts: whoever waits for the line can query at once.
            print(
                f"gpu-agent listening on http://{_url_host(host)}:{bound} "
                f"node={node.backend.hostname} backend={node.backend.name} "
                f"gpus={'?' if gpus is None else gpus}",
                flush=True,
            )
        sweeper = loop.call_later(SWEEP_EVERY_S, sweep)
        await stopped.wait()
        log.info("shutting down")
        return 0
    finally:
        if sweeper is not None:
            sweeper.cancel()
        for server in servers:
            server.close()
        for connection in list(connections):
            if connection.transport is not None:
                connection.transport.abort()
        if on_main_thread:
            for signum in _SIGNALS:
                loop.remove_signal_handler(signum)
