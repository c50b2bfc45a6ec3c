"""What one simulator process serving a whole fleet costs: startup, idle, and polled.

    python -m bench.agent.fleet [--nodes 1000] [--gpus 8] [--interval 5] [--rounds 6]

Starts ``gpu-agent --backend sim --nodes N`` on consecutive loopback ports and reports:

* startup: seconds from launch to the last "gpu-agent listening" line;
* idle: the agent's CPU share over ``--idle-seconds`` with no client at all;
* polled: one aiohttp session (keep-alive, at most ``--concurrency`` requests in flight)
  fetches every node's /v1/snapshot once per interval, as the portal does; agent CPU
  seconds per 1,000 snapshots (from /proc/<pid>/stat), the wall time of a round, and RSS;
* stop: seconds from SIGTERM to exit, and the exit code.

The agent is always stopped (SIGKILL as a fallback), whatever happens here.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parents[2]
TOKEN = "bench"


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _start(
    nodes: int, gpus: int, interval: float, port: int
) -> tuple[subprocess.Popen[str], float]:
    """Launch the agent; returns it and the seconds until every node announced itself."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [
        sys.executable, "-m", "agents.gpu_agent", "--backend", "sim",
        "--nodes", str(nodes), "--gpus", str(gpus), "--interval", str(interval),
        "--listen", f"127.0.0.1:{port}", "--token", TOKEN, "--log-level", "WARNING",
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        if line.startswith("gpu-agent listening on"):
            seen += 1
            if seen == nodes:
                break
    if seen < nodes:
        raise RuntimeError(f"only {seen} of {nodes} nodes started (exit {proc.poll()})")
    # The agent prints nothing else on stdout (logs go to stderr), so the pipe can go.
    proc.stdout.close()
    return proc, time.monotonic() - started


async def _poll(
    pid: int, urls: list[str], rounds: int, interval: float, concurrency: int
) -> tuple[int, float, float, list[float]]:
    """Every URL once per interval, after one warm-up round (connections, first collections).

    Returns snapshots fetched, agent CPU seconds, wall seconds and each round's duration,
    all counted from after the warm-up.
    """
    limit = asyncio.Semaphore(concurrency)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    fetched = 0
    round_s: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def fetch(url: str) -> None:
            nonlocal fetched
            async with limit, session.get(url) as response:
                await response.read()
                if response.status == 200:
                    fetched += 1

        cpu0 = wall0 = 0.0
        for n in range(rounds + 1):
            started = time.monotonic()
            if n == 1:
                fetched, cpu0, wall0 = 0, _cpu_s(pid), started
            await asyncio.gather(*(fetch(url) for url in urls))
            if n:
                round_s.append(time.monotonic() - started)
            if n < rounds:
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    return fetched, _cpu_s(pid) - cpu0, time.monotonic() - wall0, round_s


def _stop(proc: subprocess.Popen[str]) -> tuple[float, int | None]:
    """SIGTERM, wait up to 10 s, then SIGKILL; returns seconds to exit and the exit code."""
    if proc.poll() is not None:
        return 0.0, proc.returncode
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        return float("inf"), None
    return time.monotonic() - started, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent.fleet", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=6, help="polling rounds")
    parser.add_argument(
        "--poll-every",
        type=float,
        help="seconds between rounds (default: --interval; set it below --interval to "
        "measure serving from the cache alone)",
    )
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--port", type=int, default=20000, help="first node's port")
    args = parser.parse_args(argv)
    poll_every = args.interval if args.poll_every is None else args.poll_every
    # Turn `timeout`'s or a user's SIGTERM into an exception, so the agent is still stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    proc, startup_s = _start(args.nodes, args.gpus, args.interval, args.port)
    try:
        print(f"startup: {args.nodes} listening lines in {startup_s:.2f} s")
        print(f"RSS after start: {_status_mb(proc.pid, 'VmRSS'):.1f} MB")
        cpu0 = _cpu_s(proc.pid)
        time.sleep(args.idle_seconds)
        idle = (_cpu_s(proc.pid) - cpu0) / args.idle_seconds
        print(f"idle: {idle * 100:.2f} % of a core over {args.idle_seconds:.0f} s")

        urls = [f"http://127.0.0.1:{args.port + i}/v1/snapshot" for i in range(args.nodes)]
        fetched, cpu, wall, rounds = asyncio.run(
            _poll(proc.pid, urls, args.rounds, poll_every, args.concurrency)
        )
        print(
            f"polled: {fetched} snapshots in {args.rounds} rounds; agent CPU "
            f"{cpu:.2f} s = {cpu / fetched * 1e6:.0f} us per snapshot, "
            f"{cpu / fetched * 1000:.2f} s per 1,000; {cpu / wall * 100:.1f} % of a core; "
            f"round wall time {min(rounds):.2f}-{max(rounds):.2f} s"
        )
        print(
            f"RSS: {_status_mb(proc.pid, 'VmRSS'):.1f} MB "
            f"(peak {_status_mb(proc.pid, 'VmHWM'):.1f} MB)"
        )
    finally:
        stop_s, code = _stop(proc)
        print(f"stop: SIGTERM to exit in {stop_s:.2f} s, exit code {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
