"""Command line entry point: ``gpu-agent`` / ``python -m agents.gpu_agent``.

One process can serve many simulated nodes (``--nodes``), each on its own port, so a
laptop can stand in for a cluster. Every node is served by ``server.py`` in ``loop.py``'s
single event loop: a simulated node collects on demand (``lazy.py``), a real (NVML)
node in its collector's thread.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from agents.gpu_agent import __version__
from agents.gpu_agent.backends.base import Backend, BackendUnavailable
from agents.gpu_agent.backends.sim_vendor import VENDORS
from agents.gpu_agent.backends.smi.tool import BACKENDS as TOOL_BACKENDS
from agents.gpu_agent.backends.smi.tool import DEFAULT_TIMEOUT_S
from agents.gpu_agent.collector import Collector
from agents.gpu_agent.desired import DesiredStateStore
from agents.gpu_agent.logs import configure_logging
from agents.gpu_agent.loop import serve_nodes

log = logging.getLogger("gpu_agent")

DEFAULT_MODEL = "NVIDIA A100-SXM4-80GB"
# Long enough for a slow first NVML pass; the line is printed anyway if it expires.
FIRST_COLLECTION_TIMEOUT_S = 10.0


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    # ":9400" means every interface, as it does for dcgm-exporter's --address.
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return number


def _count(minimum: int) -> Callable[[str], int]:
    def check(value: str) -> int:
        number = int(value)
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}")
        return number

    check.__name__ = "count"  # argparse names the type in its "invalid ... value" message
    return check


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-agent", description="Serve this node's GPU readings to the GPU Portal."
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument(
        "--backend",
        choices=("sim", "nvml", "auto", *TOOL_BACKENDS),
        default="nvml",
        help="nvml (NVIDIA), a vendor tool (npu-smi: Ascend, hy-smi: Hygon DCU, rocm-smi and "
        "amd-smi: AMD, mx-smi: MetaX, mthreads-gmi: Moore Threads, cnmon: Cambricon), auto "
        "(whichever this node has) or sim (default nvml)",
    )
    p.add_argument(
        "--tool-timeout",
        type=_positive_float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long a vendor tool may take before its cards are reported lost "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--listen",
        type=parse_listen,
        default=("127.0.0.1", 9400),
        metavar="HOST:PORT",
        help="address of the first node (default 127.0.0.1:9400; port 0 picks free ports)",
    )
    p.add_argument(
        "--token",
        default=os.environ.get("GPU_AGENT_TOKEN"),
        help="bearer token for /v1/snapshot (default: $GPU_AGENT_TOKEN)",
    )
    p.add_argument("--no-auth", action="store_true", help="serve /v1/snapshot without a token")
    p.add_argument(
        "--interval",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="collection period (default 1.0)",
    )
    p.add_argument(
        "--hostname",
        default=socket.gethostname(),
        help="node name to report (default: this machine's hostname)",
    )
    p.add_argument(
        "--metrics-auth",
        action="store_true",
        help="require the token on /metrics too (default: open, as dcgm-exporter's)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="keep the portal's desired slices here across restarts (default: memory only)",
    )
    p.add_argument(
        "--kubelet-socket",
        type=Path,
        metavar="PATH",
        help="label GPUs with the pods holding them, from the kubelet pod-resources API "
        "(usually /var/lib/kubelet/pod-resources/kubelet.sock; needs grpcio and protobuf)",
    )
    p.add_argument(
        "--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
    )
    p.add_argument(
        "--log-format",
        default="text",
        choices=("text", "json"),
        help="json writes one object per line for log collectors",
    )
    sim = p.add_argument_group("simulator (--backend sim)")
    sim.add_argument("--gpus", type=_count(0), help="GPUs per node (default 8)")
    sim.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        help=f"GPU model, repeatable: node i gets model i mod count (default {DEFAULT_MODEL!r})",
    )
    sim.add_argument(
        "--vendor",
        action="append",
        choices=("nvidia", *VENDORS),
        metavar="VENDOR",
        help="repeatable: node i impersonates vendor i mod count, reporting only what that "
        f"vendor's tool shows ({', '.join(('nvidia', *VENDORS))}; default nvidia); "
        "without --model each gets its vendor's usual card",
    )
    sim.add_argument(
        "--nodes", type=_count(1), help="virtual nodes on consecutive ports (default 1)"
    )
    sim.add_argument("--seed", type=int, help="random seed (default: derived from --hostname)")
    sim.add_argument(
        "--scenario",
        type=Path,
        metavar="FILE",
        help="YAML or JSON script of loads and faults (see docs/agent.md)",
    )
    sim.add_argument(
        "--idle-owner",
        action="append",
        metavar="USER",
        help="repeatable: this user holds slices but runs nothing in them (the owners of the "
        "other slices each run a job in theirs)",
    )
    return p


class StopFlag:
    """Set from a signal handler; a bare attribute because it must not take locks."""

    requested: bool = False


def default_seed(hostname: str) -> int:
    # Derived from the name, so a restarted simulator shows the same UUIDs and serials.
    return int.from_bytes(hashlib.sha256(hostname.encode()).digest()[:4], "big")


def node_hostnames(hostname: str, nodes: int) -> list[str]:
    return [hostname] if nodes == 1 else [f"{hostname}-{i + 1:02d}" for i in range(nodes)]


# --backend auto: NVML first, then the vendor tools in this order.
AUTO_ORDER = ("npu-smi", "hy-smi", "rocm-smi", "amd-smi", "mx-smi", "mthreads-gmi", "cnmon")


def auto_backend(hostname: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Backend:
    """What this node has: NVML where nvidia-ml-py loads and finds a driver, else the first
    vendor tool on PATH (hy-smi before rocm-smi: on a Hygon node rocm-smi is DTK's)."""
    problems = []
    try:
        from agents.gpu_agent.backends.nvml import NvmlBackend

        return NvmlBackend(hostname)
    except BackendUnavailable as exc:
        problems.append(f"nvml: {exc}")
    for tool in AUTO_ORDER:
        if shutil.which(tool):
            log.info("--backend auto: %s found on PATH", tool)
            return TOOL_BACKENDS[tool](hostname, timeout_s=timeout_s)
    problems.append(f"none of {', '.join(AUTO_ORDER)} is on PATH")
    raise BackendUnavailable("; ".join(problems))


def make_backends(
    args: argparse.Namespace, clock: Callable[[], float] = time.time
) -> list[Backend]:
    if args.backend == "nvml":
        from agents.gpu_agent.backends.nvml import NvmlBackend

        return [NvmlBackend(args.hostname)]
    if args.backend == "auto":
        return [auto_backend(args.hostname, args.tool_timeout)]
    if args.backend in TOOL_BACKENDS:
        return [TOOL_BACKENDS[args.backend](args.hostname, timeout_s=args.tool_timeout)]
    from agents.gpu_agent.backends.scenario import ScenarioError, load_scenario
    from agents.gpu_agent.backends.sim import SimulatedBackend

    scenario = None
    if args.scenario is not None:
        try:
            scenario = load_scenario(args.scenario)
        except ScenarioError as exc:
            raise BackendUnavailable(f"bad scenario: {exc}") from exc
    models = args.model or [(scenario and scenario.model) or DEFAULT_MODEL]
    seed = args.seed if args.seed is not None else default_seed(args.hostname)
    gpus = args.gpus
    if gpus is None:
        gpus = scenario.gpus if scenario and scenario.gpus is not None else 8
    names = node_hostnames(args.hostname, args.nodes or 1)
    kwargs = {"clock": clock, "scenario": scenario, "idle_owners": args.idle_owner or ()}
    vendors = args.vendor or ["nvidia"]
    backends: list[Backend] = []
    for i, name in enumerate(names):
        vendor = vendors[i % len(vendors)]
        vendor = None if vendor == "nvidia" else vendor
        model = models[i % len(models)]
        if vendor is not None and not args.model:
            model = VENDORS[vendor].model
        backends.append(SimulatedBackend(name, gpus, model, seed, vendor=vendor, **kwargs))
    return backends


def desired_store(state_dir: Path | None, hostname: str) -> DesiredStateStore:
    # One file per virtual node, so a simulator serving several keeps them apart.
    path = state_dir / f"desired-state-{hostname}.json" if state_dir is not None else None
    return DesiredStateStore(path)


def make_pod_labeller(socket_path: Path | None) -> Any:
    if socket_path is None:
        return None
    try:
        from agents.gpu_agent.kubelet import KubeletPodLabeller
    except ImportError as exc:
        raise BackendUnavailable(
            f"--kubelet-socket needs grpcio and protobuf (pip install 'gpu-agent[kubernetes]'): "
            f"{exc}"
        ) from exc
    return KubeletPodLabeller(socket_path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level, args.log_format)
    if not args.token and not args.no_auth:
        parser.error(
            "no token: pass --token or set GPU_AGENT_TOKEN (or --no-auth to serve "
            "snapshots without one)"
        )
    if args.no_auth and args.token:
        log.warning("--no-auth given: the token is ignored and /v1/snapshot is open")
    if args.backend != "sim" and any(
        v is not None
        for v in (
            args.gpus,
            args.model,
            args.nodes,
            args.seed,
            args.scenario,
            args.idle_owner,
            args.vendor,
        )
    ):
        parser.error(
            "--gpus, --model, --nodes, --seed, --scenario, --vendor and --idle-owner only "
            "apply to --backend sim"
        )
    host, port = args.listen
    if port and port + (args.nodes or 1) - 1 > 65535:
        parser.error(f"--nodes {args.nodes} from port {port} runs past port 65535")

    stop = StopFlag()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.requested = True

    # Installing handlers only works on the main thread; tests may call main() elsewhere.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    try:
        backends = make_backends(args)
    except BackendUnavailable as exc:
        print(f"gpu-agent: cannot start the {args.backend} backend: {exc}", file=sys.stderr)
        return 2

    token = None if args.no_auth else args.token
    try:
        pods = make_pod_labeller(args.kubelet_socket)
    except BackendUnavailable as exc:
        print(f"gpu-agent: {exc}", file=sys.stderr)
        return 2
    if args.backend == "sim":
        try:
            return _serve_simulated(args, backends, pods, token, stop)
        finally:
            for backend in backends:
                backend.close()
    collectors = [
        Collector(backend, args.interval, desired_store(args.state_dir, backend.hostname), pods)
        for backend in backends
    ]
    try:
        for collector in collectors:
            collector.start()
        # Listen only once data exists, so whoever waits for the line can query at once.
        deadline = time.monotonic() + FIRST_COLLECTION_TIMEOUT_S
        for collector in collectors:
            collector.wait_first(max(0.0, deadline - time.monotonic()))
        return serve_nodes(collectors, host, port, token, args.metrics_auth, stop)
    finally:
        for collector in collectors:
            collector.stop()
        for backend in backends:
            backend.close()


def _serve_simulated(
    args: argparse.Namespace,
    backends: list[Backend],
    pods: Any,
    token: str | None,
    stop: StopFlag,
) -> int:
    """Every virtual node in one event loop, collecting only when asked (``lazy.py``)."""
    from agents.gpu_agent.lazy import LazyNode

    epoch = time.monotonic()
    nodes = [
        LazyNode(b, args.interval, desired_store(args.state_dir, b.hostname), pods, epoch)
        for b in backends
    ]
    host, port = args.listen
    return serve_nodes(nodes, host, port, token, args.metrics_auth, stop)
