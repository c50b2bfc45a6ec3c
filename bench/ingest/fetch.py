"""bench/ingest/fetch: the fetch stage alone (``poller.poll``: HTTP, parse, validate).

    python -m bench.ingest.fetch --nodes 1000

One simulator process serves the virtual nodes; this process polls them with the
poller (no Django, no database) once per simulator tick, just after the tick so every
answer is a fresh snapshot, and reports per cycle: wall time, CPU of this process and
CPU of the simulator. The first cycle (connecting) is reported apart. ``--poller FILE``
measures another version of telemetry/poller.py instead (``git show REV:telemetry/poller.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

from bench.ingest.run import proc_cpu_s, self_cpu_s, start_simulator


def _load_poller(path: Path | None) -> ModuleType:
    if path is None:
        from telemetry import poller

        return poller
    spec = importlib.util.spec_from_file_location("bench_poller", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _tick_phase(poller: ModuleType, target: object, interval: float, extra: dict) -> float:
    """A monotonic time at which the simulator's tick changed (within ~20 ms).

    The simulator collects on the first request of each tick, its ticks counted from
    its own start; so ask one node until its ``collected_at`` moves.
    """
    seen = None
    deadline = time.monotonic() + 3 * interval
    while time.monotonic() < deadline:
        [result] = poller.poll([target], timeout=5, concurrency=1, **extra)
        if not result.ok:
            raise SystemExit(f"the simulator does not answer: {result.error}")
        now = time.monotonic()
        if seen is not None and result.snapshot["collected_at"] != seen:
            return now
        seen = result.snapshot["collected_at"]
        time.sleep(0.02)
    raise SystemExit("could not find the simulator's tick")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--interval", type=float, default=2.0, help="simulator tick, seconds")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--first-port", type=int, default=24000)
    parser.add_argument("--path", help="override poller.SNAPSHOT_PATH (e.g. /v1/snapshot)")
    parser.add_argument("--poller", type=Path, help="measure this poller.py instead")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)

    poller = _load_poller(args.poller)
    # An older poller has no retry parameters (and reads no settings for them).
    extra = {"retries": 2, "backoff": 0.1}
    if "retries" not in inspect.signature(poller.poll).parameters:
        extra = {}
    if args.path:
        poller.SNAPSHOT_PATH = args.path
    agent = start_simulator(args.nodes, args.gpus, args.first_port, args.interval)
    try:
        targets = [
            poller.AgentTarget(i, f"http://127.0.0.1:{args.first_port + i}", "bench-token")
            for i in range(args.nodes)
        ]

        def cycle() -> dict[str, float]:
            cpu, sim, wall = self_cpu_s(), proc_cpu_s(agent.pid), time.perf_counter()
            results = poller.poll(
                targets, timeout=args.timeout, concurrency=args.concurrency, **extra
            )
            row = {
                "wall_s": time.perf_counter() - wall,
                "cpu_s": self_cpu_s() - cpu,
                "sim_cpu_s": proc_cpu_s(agent.pid) - sim,
                "ok": sum(r.ok for r in results),
            }
            failed = [r.error for r in results if not r.ok]
            if failed:
                print(f"  {len(failed)} failed, e.g. {failed[0]}")
            return row

        phase = _tick_phase(poller, targets[0], args.interval, extra)

        def wait_for_tick() -> None:
            # Start just after a tick, so that every node collects afresh for this poll.
            since = (time.monotonic() - phase) % args.interval
            time.sleep(args.interval - since + 0.05)

        wait_for_tick()
        first = cycle()
        print(
            f"first cycle (connecting): wall {first['wall_s']:.3f} s, "
            f"cpu {first['cpu_s']:.3f} s, ok {first['ok']}/{args.nodes}"
        )
        rows = []
        for _ in range(args.cycles):
            wait_for_tick()
            row = cycle()
            rows.append(row)
            print(
                f"wall {row['wall_s']:.3f} s  cpu {row['cpu_s']:.3f} s  "
                f"simulator cpu {row['sim_cpu_s']:.3f} s  ok {row['ok']}/{args.nodes}"
            )
    finally:
        agent.terminate()
        agent.wait(10)
    cpu = statistics.median(r["cpu_s"] for r in rows)
    summary = {
        "nodes": args.nodes,
        "gpus": args.gpus,
        "cycles": len(rows),
        "wall_s_median": statistics.median(r["wall_s"] for r in rows),
        "cpu_s_median": cpu,
        "cpu_us_per_request": cpu / args.nodes * 1e6,
        "cpu_us_per_gpu": cpu / (args.nodes * args.gpus) * 1e6,
        "simulator_cpu_s_median": statistics.median(r["sim_cpu_s"] for r in rows),
    }
    print(
        f"median over {len(rows)} cycles: wall {summary['wall_s_median']:.3f} s, "
        f"cpu {cpu:.3f} s = {summary['cpu_us_per_request']:.0f} µs per request, "
        f"{summary['cpu_us_per_gpu']:.1f} µs per GPU; "
        f"simulator cpu {summary['simulator_cpu_s_median']:.3f} s"
    )
    if args.json:
        results = {"summary": summary, "first": first, "cycles": rows}
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
