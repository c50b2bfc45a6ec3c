"""bench/live: websocket clients on the dashboards while the fleet is polled.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpuportal_bench \\
    REDIS_URL=redis://127.0.0.1:6379/8 SECRET_KEY=bench python -m bench.live --clients 200

Starts one simulator process (``--nodes`` x ``--gpus``), daphne, a Celery worker and
Celery beat (polling every ``--interval`` seconds), then connects ``--clients``
websocket clients: most on the fleet page, some on node pages. For every message a
client receives it records the latency from the readings' collection time
(``collected_at``, stamped by the agent when it read the cards) to arrival, and
reports p50/p95 over all clients. The database in DATABASE_URL is emptied.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from bench.ingest.run import REPO, percentile, start_simulator, tree_cpu_s

BIN = Path(sys.executable).parent


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT
    )


async def client(
    url: str,
    cookie: str,
    latencies: list[float],
    delay: float,
    measure_from: float,
    stop_at: float,
    delivery: list[float] | None = None,
) -> int:
    import aiohttp

    # Browsers arrive over time, not in one burst: spread the connects out.
    await asyncio.sleep(delay)
    received = 0
    # The page's own origin, port included: the portal checks scheme, host and port.
    origin = "http://" + urlsplit(url).netloc
    async with (
        aiohttp.ClientSession(headers={"Cookie": cookie, "Origin": origin}) as s,
        s.ws_connect(url, max_msg_size=0) as ws,
    ):
        while time.time() < stop_at:
            try:
                message = await ws.receive(timeout=max(0.1, stop_at - time.time()))
            except TimeoutError:
                break
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            now = time.time()
            data = orjson.loads(message.data)
            stamps = [n.get("collected_at") for n in data.get("nodes", [data.get("node", {})])]
            stamps = [t for t in stamps if t]
            received += 1
            # The first message is the page's initial picture, not a push.
            if received > 1 and stamps and now >= measure_from:
                latencies.append(now - max(stamps))
                if delivery is not None and data.get("sent_at"):
                    delivery.append(now - data["sent_at"])
    return received


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--node-page-clients", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--first-port", type=int, default=23000)
    parser.add_argument(
        "--web-processes",
        type=int,
        default=1,
        help="daphne processes; clients are spread over them, as a proxy would",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    from agents.models import Node

    call_command("migrate", verbosity=0)
    Node.objects.all().delete()
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "tokens.backends.PortalModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    cookie = f"{settings.SESSION_COOKIE_NAME}={session.session_key}"

    tmp = Path(tempfile.mkdtemp(prefix="bench-live-"))
    agent = start_simulator(args.nodes, args.gpus, args.first_port, args.interval)
    nodes = Node.objects.bulk_create(
        Node(name=f"bench-{i:04d}", agent_url=f"http://127.0.0.1:{args.first_port + i}",
             agent_token="bench-token")
        for i in range(args.nodes)
    )  # fmt: skip
    ports = [args.first_port + args.nodes + 20 + i for i in range(args.web_processes)]
    env = {**os.environ, "GPU_POLL_INTERVAL": str(args.interval), "LOG_LEVEL": "WARNING"}
    celery = str(BIN / "celery")
    webs = [
        start([str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "portal.asgi:application"],
              env, tmp / f"daphne-{port}.log")
        for port in ports
    ]  # fmt: skip
    procs = [
        *webs,
        start([celery, "-A", "portal", "worker", "--concurrency", "2", "--loglevel", "WARNING"],
              env, tmp / "worker.log"),
        start([celery, "-A", "portal", "beat", "--loglevel", "WARNING",
               "--schedule", str(tmp / "beat")], env, tmp / "beat.log"),
    ]  # fmt: skip
    latencies: list[float] = []
    delivery: list[float] = []
    try:
        time.sleep(8)  # daphne up, worker ready, first cycle recorded
        cpu0 = {p.pid: tree_cpu_s(p.pid) for p in [agent, *procs]}
        ramp = args.clients * 0.05
        measure_from = time.time() + ramp
        stop_at = measure_from + args.seconds
        fleet_pages = args.clients - args.node_page_clients
        urls = [f"ws://127.0.0.1:{ports[i % len(ports)]}/ws/fleet/" for i in range(fleet_pages)]
        urls += [f"ws://127.0.0.1:{ports[i % len(ports)]}/ws/nodes/{nodes[i % 10].pk}/"
                 for i in range(args.node_page_clients)]  # fmt: skip

        async def run_all() -> list[int]:
            return await asyncio.gather(*(
                client(u, cookie, latencies, i * 0.05, measure_from, stop_at, delivery)
                for i, u in enumerate(urls)
            ), return_exceptions=True)  # fmt: skip

        client_cpu0 = time.process_time()
        received = asyncio.run(run_all())
        client_cpu = time.process_time() - client_cpu0
        names = ["simulator", *[f"daphne-{p}" for p in ports], "worker", "beat"]
        cpu = {name: (tree_cpu_s(p.pid) - cpu0[p.pid]) * args.seconds / (args.seconds + ramp)
               for name, p in zip(names, [agent, *procs], strict=True)}  # fmt: skip
    finally:
        for proc in [*procs, agent]:
            proc.terminate()
        for proc in [*procs, agent]:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
    result = {
        "nodes": args.nodes,
        "gpus": args.nodes * args.gpus,
        "clients": args.clients,
        "web_processes": args.web_processes,
        "seconds": args.seconds,
        "messages": sum(r for r in received if isinstance(r, int)),
        "clients_that_got_updates": sum(1 for r in received if isinstance(r, int) and r > 1),
        "clients_failed": [repr(r) for r in received if not isinstance(r, int)][:5],
        "latency_p50_s": percentile(latencies, 0.5) if latencies else None,
        "latency_p95_s": percentile(latencies, 0.95) if latencies else None,
        "latency_mean_s": statistics.mean(latencies) if latencies else None,
        # From the publisher handing the message to the channel layer, to the client.
        "delivery_p50_s": percentile(delivery, 0.5) if delivery else None,
        "delivery_p95_s": percentile(delivery, 0.95) if delivery else None,
        "cpu_s_per_second": {k: v / args.seconds for k, v in cpu.items()},
        # The clients share this machine's two cores with the portal: their own cost.
        "clients_cpu_s_per_second": client_cpu / (args.seconds + args.clients * 0.05),
        "logs": str(tmp),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
