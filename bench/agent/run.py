"""What the node agent costs: CPU and peak memory per collection, simulated and NVML.

    python -m bench.agent [--seconds 20] [--gpus 8]

Two measurements per backend (the simulator, and the NVML code path against
pynvml patched with tests/agent/fake_nvml.py, since CI has no GPU):

* ``loop``: collections back to back in this process (collect, attribute, render
  /metrics and JSON), CPU seconds per collection. At 1 Hz that number is also the
  share of one core the collector uses.
* ``agent``: a real agent process at 1 Hz for ``--seconds``, serving HTTP, with
  /v1/snapshot and /metrics fetched every second as the portal and Prometheus
  would; its CPU share from /proc and its peak RSS (VmHWM).

Targets (issue 3): < 0.5% of one core and < 60 MB RSS with 8 GPUs.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import os, sys
sys.path.insert(0, {repo!r})
mode, gpus = sys.argv[1], int(sys.argv[2])
if mode == "nvml":
    import pynvml
    from tests.agent.fake_nvml import FakeCard, FakeProcess, install_fake_nvml
    # Two processes per card, owned by this process's PID so /proc reads are real.
    cards = [FakeCard(uuid=f"GPU-{{i:08x}}-0000-0000-0000-000000000000",
                      processes=[FakeProcess(os.getpid(), 1000), FakeProcess(1, 10)])
             for i in range(gpus)]
    install_fake_nvml(setattr, cards)
    args = ["--backend", "nvml"]
else:
    args = ["--backend", "sim", "--gpus", str(gpus)]
from agents.gpu_agent.cli import main
sys.exit(main([*args, "--no-auth", "--listen", "127.0.0.1:0", "--log-level", "WARNING"]))
"""


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _ticks()  # utime + stime


def _proc_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def loop(mode: str, gpus: int, count: int) -> tuple[float, float]:
    """CPU seconds per collection in this process, and the growth of peak RSS (MB)."""
    sys.path.insert(0, str(REPO))
    from agents.gpu_agent.backends.sim import SimulatedBackend
    from agents.gpu_agent.collector import Collector
    from agents.gpu_agent.desired import Slice

    if mode == "nvml":
        from agents.gpu_agent.backends.nvml import NvmlBackend
        from tests.agent.fake_nvml import FakeCard, FakeProcess, install_fake_nvml

        cards = [
            FakeCard(
                uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000",
                processes=[FakeProcess(os.getpid(), 1000), FakeProcess(1, 10)],
            )
            for i in range(gpus)
        ]
        install_fake_nvml(setattr, cards)
        backend = NvmlBackend("bench")
    else:
        backend = SimulatedBackend("bench", gpus, "NVIDIA H100 80GB HBM3", seed=1)
    collector = Collector(backend, 1.0)
    first = collector.collect_once().snapshot
    # Two slices per card, so attribution and the allocation series are exercised too.
    collector.desired.replace(
        [
            Slice(f"a-{g.index}-{n}", g.uuid or "", 50, 8000, "alice")
            for g in first.gpus
            for n in range(2)
        ]
    )
    before_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.process_time()
    for _ in range(count):
        collector.collect_once()
    per_collection = (time.process_time() - started) / count
    after_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return per_collection, after_rss - before_rss


def agent(mode: str, gpus: int, seconds: float) -> tuple[float, float]:
    """A real agent process at 1 Hz: (share of one core, peak RSS in MB)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(repo=str(REPO)), mode, str(gpus)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[3]
        time.sleep(2)  # past start-up: imports and the first collection are not the steady state
        cpu0, t0 = _proc_cpu_s(proc.pid), time.monotonic()
        while time.monotonic() - t0 < seconds:
            for path in ("/v1/snapshot", "/metrics"):
                with urllib.request.urlopen(url + path, timeout=5) as response:  # noqa: S310
                    response.read()
            time.sleep(1.0)
        share = (_proc_cpu_s(proc.pid) - cpu0) / (time.monotonic() - t0)
        return share, _proc_hwm_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--loop-count", type=int, default=300)
    args = parser.parse_args(argv)
    print(f"{args.gpus} GPUs; targets: < 0.5% of one core, < 60 MB RSS")
    print(f"{'backend':8} {'loop CPU/collection':>20} {'agent CPU at 1 Hz':>18} {'peak RSS':>9}")
    for mode in ("sim", "nvml"):
        per_collection, _ = loop(mode, args.gpus, args.loop_count)
        share, rss = agent(mode, args.gpus, args.seconds)
        print(f"{mode:8} {per_collection * 1000:>17.2f} ms {share * 100:>17.2f}% {rss:>6.1f} MB")
    return 0
