"""A simulated fleet's past: what its agents would have reported, moment by moment.

The portal's demo back-fills its history with it (``manage.py demo``). Given the
simulator's own command line it builds the same nodes (host names, card UUIDs, models,
load profiles, scripted scenario) on a clock that starts in the past, and at each moment
gives every node the slices the portal held there then, so the same jobs run in them
(``backends/sim_jobs.py``) and the same attribution is made: history and live readings
tell one story. Computation only: no network, no state directory.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from agents.gpu_agent import __version__
from agents.gpu_agent.cli import build_parser, make_backends
from agents.gpu_agent.collector import collect_snapshot
from agents.gpu_agent.desired import DesiredStateStore, Slice
from agents.gpu_agent.model import AgentInfo

# The slices each node (by host name) held at a moment (Unix seconds).
SlicesAt = Callable[[float], Mapping[str, Sequence[Slice]]]


def portal_views(
    argv: Sequence[str],
    start: float,
    end: float,
    slices_at: SlicesAt,
    *,
    step_s: float = 60.0,
    wanted: Collection[float] | None = None,
) -> Iterator[tuple[float, dict[str, dict[str, Any]]]]:
    """Every ``step_s`` from ``start`` until ``end``: the moment and each node's portal
    view (``/v1/snapshot?view=portal``) by host name. ``argv`` is the simulator's command
    line after ``gpu-agent``; only the moments in ``wanted`` are yielded (all without it),
    but the simulation steps through every one, so its cards drift as the live ones do."""
    args = build_parser().parse_args(list(argv))
    if args.backend != "sim":
        raise ValueError("only a simulator's past can be replayed (--backend sim)")
    now = [start]
    backends = make_backends(args, clock=lambda: now[0])
    agent = AgentInfo(__version__, "sim", args.interval)
    stores = {b.hostname: DesiredStateStore(None) for b in backends}
    held: dict[str, tuple[Slice, ...]] = {}
    moment = start
    while moment < end:
        now[0] = moment
        slices = slices_at(moment)
        views = {}
        for backend in backends:
            mine = tuple(slices.get(backend.hostname, ()))
            if held.get(backend.hostname) != mine:  # a new list only when it changed
                stores[backend.hostname].replace(list(mine))
                held[backend.hostname] = mine
            snapshot = collect_snapshot(backend, agent, stores[backend.hostname])
            if wanted is None or moment in wanted:
                views[backend.hostname] = snapshot.to_portal_dict()
        if views:
            yield moment, views
        moment += step_s
