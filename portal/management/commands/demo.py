"""Run the whole portal in one command: agents, web server, poller.

``manage.py demo`` migrates, seeds an admin, the demo's people and simulated nodes,
starts the simulator processes serving those nodes (the NVIDIA fleet, the hot node, and
one Ascend and one Hygon node in a pool of their own), polls them once (so the cards join
the demo pools), tells the demo's day of GPU requests once, fills the last day of history the
rollups lack from the simulator's past, and serves the portal with daphne while the
Celery beat schedule runs in the same process. It is what the README's first command
ends in. Each app seeds its own part (its ``demo.py``); this command puts them together.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

# daphne installs Twisted's asyncio reactor on import; it must come first.
from daphne.server import Server  # isort:skip
from daphne.endpoints import build_endpoint_description_strings  # isort:skip

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from agents.choices import NodeSource
from agents.gpu_agent import replay
from agents.models import Node
from alerts import demo as alerts_demo
from pools import demo as pools_demo
from portal import celery_app, embedded, embedded_db
from portal.files import private_secret
from quotas import demo as quotas_demo
from reports import demo as reports_demo
from telemetry import demo as telemetry_demo
from telemetry import tasks as telemetry_tasks

DEMO_MODELS = [
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA L40S",
    "Tesla T4",
]
DEMO_PREFIX = "demo"
AGENT_START_TIMEOUT_S = 30
# One more node whose first card overheats a minute after start (the simulator's hot
# scenario): the temperature rule fires five minutes later and resolves when it cools.
HOT_NODE = f"{DEMO_PREFIX}-hot"
HOT_SCENARIO = Path(__file__).resolve().parents[3] / "agents/gpu_agent/scenarios/hot.json"
# A mixed fleet (issue #25): two more nodes from one simulator impersonating other vendors,
# each with its vendor's usual card (no --model, which would override it), in their own
# pool. The simulator names its hosts <prefix>-01, -02; the portal names them by vendor.
DOMESTIC_VENDORS = ("ascend", "hygon")
DOMESTIC_PREFIX = f"{DEMO_PREFIX}-cn"
DOMESTIC_NODES = {
    f"{DOMESTIC_PREFIX}-{i + 1:02d}": f"{DEMO_PREFIX}-{vendor}"
    for i, vendor in enumerate(DOMESTIC_VENDORS)
}
DOMESTIC_LABELS = {"accelerator": "domestic"}
# The simulators, in port order after the fleet's: the hot node, then the domestic ones.
KINDS = ("fleet", "hot", "domestic")
# The minute rollups keep a week; a day and a half is what the idle scan and charts read.
MAX_HISTORY_HOURS = 36
HISTORY_STEP_S = 10


class _Terminated(BaseException):
    """SIGTERM before the web server's own handlers: unwinds the command's ``finally``
    blocks (the simulators, the embedded database) like Ctrl+C does."""


_terminating = threading.Event()


def _on_sigterm(signum: int, frame) -> None:
    # Only noted: the start stops at its next step (_go_on). An exception raised here lands
    # wherever the process is, and one that cut a database call short left its connection
    # unusable for the cleanup (psycopg: "connection in transaction status ACTIVE").
    _terminating.set()


def _go_on() -> None:
    """Between the start's steps (and the history's moments): stop if SIGTERM came."""
    if _terminating.is_set():
        raise _Terminated


def _var_secret(name: str, nbytes: int = 18) -> str:
    """A secret generated once and kept under var/, so restarts keep the same login."""
    return private_secret(Path(settings.VAR_DIR) / name, nbytes)


class Command(BaseCommand):
    help = "Run the portal with simulated GPU nodes, all in one process tree."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to serve on")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--agent-port",
            type=int,
            default=9401,
            help="first port of the simulated agents (one per node)",
        )
        parser.add_argument("--nodes", type=int, default=4, help="simulated nodes")
        parser.add_argument("--gpus", type=int, default=8, help="GPUs per simulated node")
        parser.add_argument("--username", default="admin")
        parser.add_argument(
            "--history-hours",
            type=int,
            default=24,
            help=f"hours of history to fill from the simulator where the rollups have none "
            f"(0-{MAX_HISTORY_HOURS}; default 24)",
        )

    def handle(self, *args, **options) -> None:
        # SIGTERM's default ends the process at once: the children it started would be
        # left running. Until daphne installs its handlers, it unwinds instead.
        signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            self._handle(options)
        except _Terminated:
            self.stderr.write("stopped (SIGTERM) while starting")
            # Ended by the signal it was sent, as its supervisor expects.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def _handle(self, options: dict) -> None:
        if settings.EMBEDDED_DATABASE is None:
            self._demo(options)
            return
        # No DATABASE_URL: the portal's own PostgreSQL, up before migrate, down after the
        # web server and the agents have stopped.
        server = embedded_db.Server(**settings.EMBEDDED_DATABASE)
        try:
            server.start()
        except embedded_db.EmbeddedDatabaseError as exc:
            raise CommandError(str(exc)) from None
        try:
            self._demo(options)
        finally:
            server.stop()

    def _demo(self, options: dict) -> None:
        if not 1 <= options["nodes"] <= 64 or not 1 <= options["gpus"] <= 16:
            raise CommandError("--nodes must be 1-64 and --gpus 1-16")
        if not 0 <= options["history_hours"] <= MAX_HISTORY_HOURS:
            raise CommandError(f"--history-hours must be 0-{MAX_HISTORY_HOURS}")
        # One process tree, no worker: tasks sent run in process, as without REDIS_URL (a
        # request step's notices and pushes, alert deliveries, desired-state sends).
        celery_app.conf.task_always_eager = True
        call_command("migrate", interactive=False, verbosity=0)
        password = self._seed_admin(options["username"])
        people = {name: _var_secret(f"demo-{name}-password", 12) for name in quotas_demo.PEOPLE}
        quotas_demo.seed_people(people)
        token = _var_secret("demo-agent-token")
        self._seed_nodes(options, token)
        admin = get_user_model().objects.get(username=options["username"])
        pool = pools_demo.seed(admin, {"demo": "true"})
        domestic = pools_demo.seed_domestic(admin, DOMESTIC_LABELS)
        reports_demo.seed(admin, pool)
        self._seed_alerts(admin)
        _go_on()
        agents: list[subprocess.Popen] = []
        try:
            for kind in KINDS:
                agents.append(self._start_agents(options, token, kind))
            pools_demo.send_desired_state(self._node_names(options).values())
            # One poll before the rest: the cards are known and join the pool, so the
            # story's requests can be placed on them.
            telemetry_tasks.poll_agents()
            _go_on()
            if quotas_demo.seed_story(admin, pool, DEMO_MODELS):
                self.stdout.write("Told the demo's day of GPU requests.")
            _go_on()
            if quotas_demo.seed_domestic(admin, domestic):
                self.stdout.write("Asked for the Ascend and Hygon cards.")
            _go_on()
            self._fill_history(options)
            _go_on()
            self._serve(options, password, people)
        finally:
            for agent in agents:
                agent.terminate()
                try:
                    agent.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    agent.kill()

    def _seed_alerts(self, admin) -> None:
        """The admin's demo email and webhook channels; mail on this console unless an
        SMTP server is configured (EMAIL_HOST), webhook calls printed by a receiver here."""
        if "EMAIL_HOST" not in os.environ:
            settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
        url = alerts_demo.start_receiver()
        alerts_demo.seed(admin, webhook_url=url, secret=_var_secret("demo-webhook-secret"))

    def _seed_admin(self, username: str) -> str:
        password = _var_secret("demo-admin-password", 12)
        user_model = get_user_model()
        user, _ = user_model.objects.get_or_create(
            username=username, defaults={"is_staff": True, "is_superuser": True}
        )
        if not user.check_password(password):
            user.set_password(password)
            user.save()
        return password

    @transaction.atomic
    def _seed_nodes(self, options: dict, token: str) -> None:
        agent_host = "127.0.0.1" if options["host"] in ("0.0.0.0", "::") else options["host"]  # noqa: S104
        for i in range(options["nodes"]):
            name = _node_name(i)
            Node.objects.update_or_create(
                name=name,
                defaults={
                    "source": NodeSource.AGENT,
                    "agent_url": f"http://{agent_host}:{options['agent_port'] + i}",
                    "agent_token": token,
                    "labels": {"demo": "true", "model": DEMO_MODELS[i % len(DEMO_MODELS)]},
                },
            )
        Node.objects.update_or_create(
            name=HOT_NODE,
            defaults={
                "source": NodeSource.AGENT,
                "agent_url": f"http://{agent_host}:{self._port(options, 'hot')}",
                "agent_token": token,
                "labels": {"scenario": "hot"},
            },
        )
        for i, (name, vendor) in enumerate(zip(DOMESTIC_NODES.values(), DOMESTIC_VENDORS,
                                               strict=True)):  # fmt: skip
            Node.objects.update_or_create(
                name=name,
                defaults={
                    "source": NodeSource.AGENT,
                    "agent_url": f"http://{agent_host}:{self._port(options, 'domestic') + i}",
                    "agent_token": token,
                    "labels": {**DOMESTIC_LABELS, "vendor": vendor},
                },
            )

    @staticmethod
    def _port(options: dict, kind: str) -> int:
        """The first port of a simulator: the fleet's nodes, the hot node, the domestic."""
        return options["agent_port"] + {
            "fleet": 0, "hot": options["nodes"], "domestic": options["nodes"] + 1,
        }[kind]  # fmt: skip

    @staticmethod
    def _count(options: dict, kind: str) -> int:
        return {"fleet": options["nodes"], "hot": 1, "domestic": len(DOMESTIC_VENDORS)}[kind]

    def _agent_args(self, options: dict, kind: str = "fleet") -> list[str]:
        """The simulator's command line after ``gpu-agent``: the fleet, the hot node, or
        the domestic nodes."""
        hostname = {"fleet": DEMO_PREFIX, "hot": HOT_NODE, "domestic": DOMESTIC_PREFIX}[kind]
        args = [
            "--backend", "sim", "--nodes", str(self._count(options, kind)),
            "--gpus", str(options["gpus"]), "--hostname", hostname,
            "--listen", f"{options['host']}:{self._port(options, kind)}",
        ]  # fmt: skip
        if kind == "hot":
            return [*args, "--scenario", str(HOT_SCENARIO), "--model", DEMO_MODELS[1]]
        if kind == "domestic":
            return [*args, *(a for vendor in DOMESTIC_VENDORS for a in ("--vendor", vendor))]
        for model in DEMO_MODELS:
            args += ["--model", model]
        # The story's idle slice: its owner runs nothing in it (backends/sim_jobs.py).
        return [*args, "--idle-owner", quotas_demo.IDLE_OWNER]

    def _start_agents(self, options: dict, token: str, kind: str) -> subprocess.Popen:
        nodes, port = self._count(options, kind), self._port(options, kind)
        command = [sys.executable, "-m", "agents.gpu_agent", *self._agent_args(options, kind)]
        # The token travels in the environment, not on a command line others can read.
        env = {**os.environ, "GPU_AGENT_TOKEN": token}
        agent = subprocess.Popen(command, stdout=subprocess.PIPE, env=env, text=True)  # noqa: S603
        ready = threading.Event()
        listening = []

        def watch() -> None:
            for line in agent.stdout:
                if line.startswith("gpu-agent listening on"):
                    listening.append(line.strip())
                    if len(listening) == nodes:
                        ready.set()
            ready.set()  # the agent exited: stop waiting

        threading.Thread(target=watch, daemon=True).start()
        try:
            ready.wait(AGENT_START_TIMEOUT_S)
        except BaseException:  # stopped while it starts: not yet the caller's to stop
            agent.kill()
            agent.wait()
            raise
        if len(listening) < nodes:
            agent.kill()
            raise CommandError(f"the simulated agents did not start (ports {port}+ in use?)")
        return agent

    def _node_names(self, options: dict) -> dict[str, str]:
        """The simulators' host names (one node alone is named as --hostname) -> the nodes."""
        hosts = [DEMO_PREFIX] if options["nodes"] == 1 else [
            f"{DEMO_PREFIX}-{i + 1:02d}" for i in range(options["nodes"])
        ]  # fmt: skip
        return (
            {host: _node_name(i) for i, host in enumerate(hosts)}
            | {HOT_NODE: HOT_NODE}
            | (DOMESTIC_NODES)
        )

    def _fill_history(self, options: dict) -> None:
        """The minutes of the last ``--history-hours`` the rollups lack, as the simulator
        would have reported them with the slices the portal held then."""
        end = timezone.now().replace(second=0, microsecond=0)
        start = end - timedelta(hours=options["history_hours"])
        node_of = self._node_names(options)
        missing = telemetry_demo.missing_minutes(node_of.values(), start, end)
        if not missing:
            return
        began = time.monotonic()
        held = pools_demo.held_slices(node_of.values(), start)
        host_of = {node: host for host, node in node_of.items()}

        def slices_at(t: float) -> dict[str, list]:
            moment = datetime.fromtimestamp(t, UTC)
            by_host = defaultdict(list)
            for h in held:
                if h.held_at(moment):
                    by_host[host_of[h.node]].append(h.slice)
            return by_host

        # A reading every HISTORY_STEP_S, as the poller's cycles would have read them.
        per_minute = range(0, 60, HISTORY_STEP_S)
        wanted = {m.timestamp() + s for m in missing for s in per_minute}
        streams = [
            replay.portal_views(self._agent_args(options, kind), start.timestamp(),
                                end.timestamp(), slices_at, step_s=HISTORY_STEP_S, wanted=wanted)
            for kind in KINDS
        ]  # fmt: skip
        written = telemetry_demo.backfill(_merged(streams, node_of))
        self.stdout.write(
            f"History: {len(missing)} minute(s) filled from the simulator "
            f"({written} GPU-minutes, {time.monotonic() - began:.0f} s)."
        )

    def _serve(self, options: dict, password: str, people: dict[str, str]) -> None:
        from portal.asgi import application

        url = f"http://{options['host']}:{options['port']}/"
        tasks: list = []

        def ready() -> None:
            import asyncio

            from twisted.internet import reactor
            from twisted.internet.defer import Deferred

            tasks.extend(
                embedded.start(celery_app, settings.CELERY_BEAT_SCHEDULE, asyncio.get_event_loop())
            )
            # A SIGTERM noted after the last step, before the reactor's own handlers.
            reactor.callWhenRunning(lambda: _terminating.is_set() and reactor.stop())
            # On Ctrl+C or SIGTERM the runs in flight finish before the loop stops.
            reactor.addSystemEventTrigger(
                "before", "shutdown",
                lambda: Deferred.fromFuture(asyncio.ensure_future(embedded.stop(tasks))),
            )  # fmt: skip
            mode = "embedded" if settings.EMBEDDED else "PostgreSQL/Redis"
            self.stdout.write(
                f"GPU Portal is running at {url} ({mode}, "
                f"{options['nodes']} simulated nodes x {options['gpus']} GPUs, the hot "
                f"node, and {len(DOMESTIC_NODES)} Ascend/Hygon nodes)\n"
                f"Log in as {options['username']} / {password}\n"
                + "".join(
                    f"  or as {name} / {people[name]} ({what}: {', '.join(roles)})\n"
                    for name, (what, roles) in quotas_demo.PEOPLE.items()
                )
                + "Press Ctrl+C to stop."
            )
            self.stdout.flush()

        started = time.monotonic()
        server = Server(
            application=application,
            endpoints=build_endpoint_description_strings(
                host=options["host"], port=options["port"]
            ),
            ready_callable=ready,
        )
        server.run()
        self.stdout.write(f"stopped after {time.monotonic() - started:.0f} s")


def _node_name(index: int) -> str:
    return f"{DEMO_PREFIX}-{index + 1:02d}"


def _merged(streams: list[Iterator], node_of: dict[str, str]) -> Iterator[tuple[datetime, dict]]:
    """The replays of the fleet, the hot node and the domestic nodes, moment by moment
    (they step alike),
    each view under its node's name."""
    for parts in zip(*streams, strict=True):
        _go_on()
        views = {}
        for _moment, part in parts:
            views.update({node_of[host]: view for host, view in part.items()})
        yield datetime.fromtimestamp(parts[0][0], UTC), views
