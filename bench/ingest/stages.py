"""bench/ingest's stage timers: CPU of each stage of a poll cycle, by wrapping the functions.

Each wrapper adds the CPU time of the thread it runs in (``time.thread_time``): the fetch
runs in the poller's event-loop thread, everything else in the caller's, and the caller
waits without CPU while the poller's thread works, so the stages add up to the cycle.
PostgreSQL's and Redis's CPU are their processes', counted by the bench apart.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

# (stage, module, attribute) in the order a cycle runs them.
STAGES = (
    ("targets", "telemetry.services", "agent_targets"),
    ("fetch", "telemetry.poller", "poll"),  # everything in the poller's thread, minus below
    ("decode", "telemetry.poller", "_loads"),
    ("check", "agents.gpu_agent.schema", "check_snapshot"),
    ("inventory", "telemetry.services", "_record_gpus"),
    ("node_rows", "telemetry.services", "_record_answers"),
    ("node_rows", "telemetry.services", "_record_failures"),
    ("latest", "telemetry.readings", "store_latest"),
    ("sample_buffer", "telemetry.sample_buffer", "buffer_samples"),
    ("tiles", "telemetry.services", "_tile_rows"),
    ("live_publish", "telemetry.live", "publish_nodes"),
    ("alerts", "alerts.sources.metrics", "evaluate_cycle"),
    ("alerts", "alerts.sources.metrics", "evaluate_windows"),
    ("receivers", "telemetry.signals.poll_cycle_recorded", "send_robust"),
    ("metrics", "telemetry.metrics", "record_poll"),
)
# Stages that run inside another one and are subtracted from it.
INSIDE = {"decode": "fetch", "check": "fetch", "alerts": "receivers"}


class Timers:
    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list[Callable[[], None]] = []

    def _wrap(self, stage: str, func: Callable, clock: Callable[[], float]) -> Callable:
        cpu, calls = self.cpu, self.calls

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return func(*args, **kwargs)
            finally:
                cpu[stage] = cpu.get(stage, 0.0) + clock() - started
                calls[stage] = calls.get(stage, 0) + 1

        return timed

    def install(self, self_cpu: Callable[[], float]) -> None:
        import importlib

        for stage, module_name, attribute in STAGES:
            owner: Any
            try:
                owner = importlib.import_module(module_name)
            except ImportError:
                head, _, tail = module_name.rpartition(".")
                owner = getattr(importlib.import_module(head), tail)
            func = getattr(owner, attribute, None)
            if func is None:
                continue
            # The fetch blocks the caller while the poller's thread works: process CPU.
            clock = self_cpu if stage == "fetch" else time.thread_time
            setattr(owner, attribute, self._wrap(stage, func, clock))
            self._undo.append(functools.partial(setattr, owner, attribute, func))

    def reset(self) -> None:
        self.cpu.clear()
        self.calls.clear()

    def net(self, cycles: int) -> dict[str, float]:
        """CPU seconds per cycle, each stage without the ones inside it."""
        out = dict(self.cpu)
        for inner, outer in INSIDE.items():
            if inner in out and outer in out:
                out[outer] -= out[inner]
        return {k: v / cycles for k, v in out.items()}


@contextlib.contextmanager
def profiled(path: str | None, loop: Any = None) -> Iterator[None]:
    """cProfile of the calling thread and, given the poller's loop, of its thread too;
    written to ``path`` and ``path``.fetch as pstats files."""
    if not path:
        yield
        return
    main = cProfile.Profile()
    fetch = cProfile.Profile()
    if loop is not None:
        loop.call_soon_threadsafe(fetch.enable)
    main.enable()
    try:
        yield
    finally:
        main.disable()
        main.dump_stats(path)
        if loop is not None:
            done = __import__("threading").Event()

            def stop() -> None:
                fetch.disable()
                done.set()

            loop.call_soon_threadsafe(stop)
            done.wait(5)
            fetch.dump_stats(f"{path}.fetch")
