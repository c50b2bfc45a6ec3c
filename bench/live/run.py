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
import re
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
    records: list[tuple[float, ...]],
    delay: float,
    measure_from: float,
    stop_at: float,
    full_parse: bool = False,
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
            received += 1
            # The first message is the page's initial picture, not a push.
            if received == 1 or now < measure_from:
                continue
            if full_parse:  # what a browser does with it: every tile parsed
                data = orjson.loads(message.data)
                items = data.get("nodes", [data.get("node", {})])
                stamps = [t for t in (n.get("collected_at") for n in items) if t]
                newest = max(stamps) if stamps else None
            else:  # only the stamps the publisher puts ahead of the tiles, and the consumer's
                data = _stamps(message.data)
                newest = data.get("collected_at")
            if newest:
                # (arrived, newest reading, answers in, handed to the layer, consumer had it)
                stamps = [data.get(k) or 0.0 for k in ("fetched_at", "sent_at", "handled_at")]
                records.append((now, newest, *stamps))
    return received


_STAMP = re.compile(r'"(sent_at|fetched_at|collected_at|handled_at)":([0-9.e+]+)')


def _stamps(text: str) -> dict[str, float]:
    """The message's stamps from its head (the publisher's) and tail (the consumer's)."""
    found = _STAMP.findall(text[:200]) + _STAMP.findall(text[-40:])
    return {name: float(value) for name, value in found}


def stages(records: list[tuple[float, ...]]) -> dict[str, dict[str, float]]:
    """p50/p95 of each stage between the agent's reading and the client's receipt."""
    spans: dict[str, list[float]] = {
        "total": [], "fetch": [], "record_and_publish": [], "channel_layer": [],
        "socket_and_client": [],
    }  # fmt: skip
    for now, collected, fetched, sent, handled in records:
        spans["total"].append(now - collected)
        if fetched and sent and handled:
            spans["fetch"].append(fetched - collected)
            spans["record_and_publish"].append(sent - fetched)
            spans["channel_layer"].append(handled - sent)
            spans["socket_and_client"].append(now - handled)
    # One push reaches every consumer of a process in turn: the spread from the first
    # consumer that handled it to the last is daphne's per-socket forwarding.
    handled_by_push: dict[float, list[float]] = {}
    for _, _, _, sent, handled in records:
        if sent and handled:
            handled_by_push.setdefault(sent, []).append(handled)
    spans["fan_out_spread"] = [max(h) - min(h) for h in handled_by_push.values() if len(h) > 1]
    return {
        name: {"p50": round(percentile(v, 0.5), 4), "p95": round(percentile(v, 0.95), 4)}
        for name, v in spans.items()
        if v
    }


def wait_until_steady(redis_url: str, limit_s: float = 150.0) -> float:
    """Wait for the polls queue to drain, then return the wait. A new fleet's first cycle
    queues one desired-state send per node (pools' after_poll_cycle, some 10 s after the
    cycle), which holds the polls up for half a minute on two cores: not the steady state."""
    import redis

    broker = redis.Redis.from_url(redis_url)
    started = time.monotonic()
    calm = 0
    time.sleep(15)
    while time.monotonic() - started < limit_s and calm < 5:
        time.sleep(1)
        busy = broker.llen("polls") + broker.hlen("unacked")
        calm = calm + 1 if busy <= 8 else 0
    return time.monotonic() - started


def run_clients(args, ports: list[int], nodes, cookie: str, count: int) -> dict:
    records: list[tuple[float, ...]] = []
    ramp = count * 0.05
    measure_from = time.time() + ramp
    stop_at = measure_from + args.seconds
    node_pages = min(args.node_page_clients, count // 10)
    fleet_pages = count - node_pages
    urls = [f"ws://127.0.0.1:{ports[i % len(ports)]}/ws/fleet/" for i in range(fleet_pages)]
    urls += [f"ws://127.0.0.1:{ports[i % len(ports)]}/ws/nodes/{nodes[i % 10].pk}/"
             for i in range(node_pages)]  # fmt: skip

    async def run_all() -> list[int]:
        return await asyncio.gather(*(
            client(u, cookie, records, i * 0.05, measure_from, stop_at, args.full_parse)
            for i, u in enumerate(urls)
        ), return_exceptions=True)  # fmt: skip

    load_before = os.getloadavg()
    client_cpu0 = time.process_time()
    received = asyncio.run(run_all())
    client_cpu = time.process_time() - client_cpu0
    latencies = [r[0] - r[1] for r in records]
    delivery = [r[0] - r[3] for r in records if r[3]]
    return {
        "clients": count,
        "clients_full_parse": args.full_parse,
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "messages": sum(r for r in received if isinstance(r, int)),
        "clients_that_got_updates": sum(1 for r in received if isinstance(r, int) and r > 1),
        "clients_failed": [repr(r) for r in received if not isinstance(r, int)][:5],
        "latency_p50_s": percentile(latencies, 0.5) if latencies else None,
        "latency_p95_s": percentile(latencies, 0.95) if latencies else None,
        "latency_mean_s": statistics.mean(latencies) if latencies else None,
        # From the publisher handing the message to the channel layer, to the client.
        "delivery_p50_s": percentile(delivery, 0.5) if delivery else None,
        "delivery_p95_s": percentile(delivery, 0.95) if delivery else None,
        "stages_s": stages(records),
        # The clients share this machine's two cores with the portal: their own cost.
        "clients_cpu_s_per_second": client_cpu / (args.seconds + ramp),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument(
        "--clients",
        default="200",
        help="websocket clients; a comma list (50,100,200) runs each in turn: a scale curve",
    )
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
    parser.add_argument(
        "--full-parse",
        action="store_true",
        help="clients parse every tile, as a browser does (their CPU is on these cores too)",
    )
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        help="processes that spin on the CPU while the clients run: the machine busy",
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
    env = {**os.environ, "GPU_POLL_INTERVAL": str(args.interval), "LOG_LEVEL": "WARNING",
           "LIVE_STAGE_STAMPS": "1"}  # fmt: skip
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
    steps: list[dict] = []
    try:
        time.sleep(8)  # daphne up, worker ready, first cycle recorded
        steady_wait = wait_until_steady(settings.REDIS_URL)
        for count in [int(c) for c in str(args.clients).split(",")]:
            cpu0 = {p.pid: tree_cpu_s(p.pid) for p in [agent, *procs]}
            wall0 = time.monotonic()
            spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                        for _ in range(args.busy)]  # fmt: skip
            try:
                step = run_clients(args, ports, nodes, cookie, count)
            finally:
                for spinner in spinners:
                    spinner.kill()
                    spinner.wait()
            step["busy_processes"] = args.busy
            wall = time.monotonic() - wall0
            names = ["simulator", *[f"daphne-{p}" for p in ports], "worker", "beat"]
            step["cpu_s_per_second"] = {
                name: round((tree_cpu_s(p.pid) - cpu0[p.pid]) / wall, 3)
                for name, p in zip(names, [agent, *procs], strict=True)
            }
            steps.append(step)
            print(json.dumps(step), file=sys.stderr, flush=True)
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
        "web_processes": args.web_processes,
        "seconds": args.seconds,
        "cpu_count": os.cpu_count(),
        "steady_wait_s": round(steady_wait, 1),
        **(steps[-1] if len(steps) == 1 else {"curve": steps}),
        "logs": str(tmp),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0
