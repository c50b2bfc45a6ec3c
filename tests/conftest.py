"""Shared fixtures: real PostgreSQL, Redis, agents and Celery, started per test or session."""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.conf import global_settings, settings
from django.contrib.auth.hashers import get_hashers, get_hashers_by_algorithm
from django.contrib.auth.models import AbstractBaseUser
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.operations import RunPython
from django.db.models.signals import post_migrate
from django.utils import translation
from hypothesis import settings as hypothesis_settings
from playwright.sync_api import Browser, sync_playwright
from whitenoise.middleware import WhiteNoiseMiddleware

from portal import redis_client
from tests import procs, raw_http
from tests.cast import CAST, person

AGENT_TOKEN = "test-agent-token"

# Property tests judge answers, not speed: a machine busy with other work must not fail an
# example for taking longer than hypothesis' default 200 ms (benchmarks live in bench/).
hypothesis_settings.register_profile("portal", deadline=None)
hypothesis_settings.load_profile("portal")

# Passwords hashed with MD5 in this process and every one it starts (they inherit the
# environment): PBKDF2's deliberate ~0.5 s per hash made every user created and every login
# cost seconds on a busy machine. What a login test proves does not depend on the hasher.
os.environ["TEST_FAST_PASSWORD_HASHER"] = "1"
settings.PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.MD5PasswordHasher",
    *global_settings.PASSWORD_HASHERS,
]
get_hashers.cache_clear()
get_hashers_by_algorithm.cache_clear()

_finder_scan = WhiteNoiseMiddleware.add_files_from_finders
_finder_files: dict[str, dict] = {}

# The clusters' tests share their team, Kubernetes API and cluster (tests/kube_world.py).
pytest_plugins = ["tests.kube_world"]


def _add_files_from_finders_once(self: WhiteNoiseMiddleware) -> None:
    # Every test client builds its own middleware chain, and WhiteNoise's finder scan stats
    # the ~6,400 files of the UI kit and its icons each time: a second of CPU (many seconds on
    # a busy machine) per client. The files do not change during a run: scan them once.
    if self.static_prefix not in _finder_files:
        before = dict(self.files)
        _finder_scan(self)
        _finder_files[self.static_prefix] = {
            url: file for url, file in self.files.items() if before.get(url) is not file
        }
    self.files.update(_finder_files[self.static_prefix])


WhiteNoiseMiddleware.add_files_from_finders = _add_files_from_finders_once


def _worker_redis_url(url: str | None) -> str | None:
    """Under pytest-xdist each worker flushes a Redis database of its own: REDIS_URL's
    database number plus the worker's index (gw0 keeps it, gw1 takes the next, ...)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not url or not worker.startswith("gw"):
        return url
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0) + int(worker[2:])
    if db > 15:
        raise pytest.UsageError(f"{worker} would need Redis database {db}: lower REDIS_URL's")
    return urlunsplit(parts._replace(path=f"/{db}"))


if (_url := _worker_redis_url(settings.REDIS_URL)) != settings.REDIS_URL:
    # Settings were read before this file (pytest-django loads them first): point every
    # Redis user at the worker's database, and the processes the tests start too.
    os.environ["REDIS_URL"] = settings.REDIS_URL = _url
    settings.CACHES["default"]["LOCATION"] = _url
    # Only the address: the layer's connection options (no read timeout) stay as set.
    for host in settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]:
        host["address"] = _url
    settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = _url


# The migrations whose RunPython writes rows, and those whose RunPython changes the schema
# only. Every RunPython is in one (tests/test_migration_data.py), so a new data migration
# cannot be left out of what a flush gets back.
DATA_MIGRATIONS = {("alerts", "0002_rules"), ("alerts", "0003_notice_rules"),
                   ("alerts", "0006_event_summary_keys"),
                   ("alerts", "0008_unlimited_processes")}  # fmt: skip
# Code that leaves nothing a flush takes away: audit's trigger outlives TRUNCATE; quotas
# 0008 only marks the rows an upgrade finds (a fresh database has none).
SCHEMA_MIGRATIONS = {("audit", "0001_initial"), ("quotas", "0008_notice_push_outbox")}


@functools.cache
def _data_migration_steps(alias: str) -> list[tuple[str, Callable, object]]:
    """(app label, RunPython code, the historical apps it ran with) for each data
    migration, in the order migrate applies them."""
    executor = MigrationExecutor(connections[alias])
    targets = executor.loader.graph.leaf_nodes()
    steps = []
    for migration, _backwards in executor.migration_plan(targets, clean_start=True):
        if (migration.app_label, migration.name) not in DATA_MIGRATIONS:
            continue
        # Each RunPython sees the models as the operations before it in its migration
        # left them, as Migration.apply runs it.
        state = executor.loader.project_state((migration.app_label, migration.name))
        for op in migration.operations:
            if isinstance(op, RunPython):
                steps.append((migration.app_label, op.code, state.clone().apps))
            else:
                op.state_forwards(migration.app_label, state)
    return steps


def _rewrite_migration_data(sender, using: str, **kwargs) -> None:
    # A transactional test's teardown empties every table (manage.py flush), the rows the
    # data migrations wrote with them; flush then sends post_migrate, without the plan that
    # migrate sends. Each app's data migrations run again there, as migrate ran them, so
    # whichever test comes next on this worker finds the database migrate left.
    if "plan" in kwargs:
        return
    connection = connections[using]
    for app_label, code, historical in _data_migration_steps(using):
        if app_label == sender.label:
            with connection.schema_editor() as editor:
                code(historical, editor)


post_migrate.connect(_rewrite_migration_data, dispatch_uid="tests.rewrite_migration_data")


def pytest_sessionstart(session: pytest.Session) -> None:
    # The suite tests the production stack; a missing service is a failure, never a skip.
    engine = settings.DATABASES["default"]["ENGINE"]
    problems = []
    if "postgresql" not in engine:
        problems.append(f"DATABASE_URL must point at PostgreSQL (engine is {engine})")
    if not settings.REDIS_URL:
        problems.append("REDIS_URL must point at Redis")
    else:
        try:
            redis.Redis.from_url(settings.REDIS_URL).ping()
        except redis.RedisError as exc:
            problems.append(f"Redis at {settings.REDIS_URL} does not answer: {exc}")
    if problems:
        pytest.exit("; ".join(problems) + ". Run the suite with ./dev test.", returncode=3)


@pytest.fixture(autouse=True)
def _clean_redis() -> None:
    # The test Redis database is the suite's own: every test starts from empty, so no
    # cached reading, rollup buffer or channel group leaks from one test into the next.
    redis.Redis.from_url(settings.REDIS_URL).flushdb()


@pytest.fixture(autouse=True)
def _default_language() -> Iterator[None]:
    # A request's LocaleMiddleware activates its language on the test's own thread and
    # nothing deactivates it: without this, a Chinese page leaves the next test in Chinese.
    translation.activate(settings.LANGUAGE_CODE)
    yield
    translation.deactivate()


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Celery tasks run in the test's process as they are sent (Celery's eager mode, as the
    embedded default runs them): for tests of what a service's after-commit task does, a
    request step's notices (``quotas.tasks.send_notices``) above all."""
    from portal.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture
def in_process_redis(settings) -> Iterator[redis.Redis]:
    """The embedded default's store: with no REDIS_URL, the data paths' client is an
    in-process server (fresh for each test), as ``./dev up`` runs them."""
    settings.REDIS_URL = None
    # A patch of its own: a test's monkeypatch.undo() must not bring Redis back mid-test.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(redis_client, "_client", None)
        yield redis_client.client()


@pytest.fixture(params=["redis", "in-process"])
def store(request) -> redis.Redis:
    """The data paths' store: the suite's Redis, then the embedded default's in-process one."""
    if request.param == "in-process":
        return request.getfixturevalue("in_process_redis")
    return redis_client.client()


# --- named actors ------------------------------------------------------------------------
# The one cast (tests/cast.py), a fixture each; each password is the name followed by "-pw-1".
# Test both sides of every boundary with them: the one allowed and the one refused.
#   alice  the platform admin: a superuser          oscar  a platform admin by permission alone
#   bob    a member (acme's, in the teams)           carol  an operator: the node permissions
#   dave   staff without permissions, in no tenant   erin   a tenant admin (acme's)
#   andy   an approver (acme's)                      tom    another tenant's admin (bravo's)
#   bella  an outsider to acme (bravo's member)
# Their tenants and GPUs come with the ``teams`` fixture (tests/tenants.py).


def _actor(name: str):
    @pytest.fixture(name=name)
    def actor_fixture(db) -> AbstractBaseUser:
        return person(name)

    actor_fixture.__doc__ = CAST[name].about
    return actor_fixture


# One fixture per actor, named after it (pytest finds fixtures among the module's names).
for _name in CAST:
    globals()[_name] = _actor(_name)


@pytest.fixture
def actor(request: pytest.FixtureRequest) -> AbstractBaseUser | None:
    """The named actor a test is parametrized with (``"anonymous"`` is None)."""
    name = request.param
    return None if name == "anonymous" else request.getfixturevalue(name)


@pytest.fixture
def everyone(request: pytest.FixtureRequest) -> dict[str, AbstractBaseUser]:
    """The whole cast, by name (the very users a test's own ``alice``... fixtures give)."""
    return {name: request.getfixturevalue(name) for name in CAST}


# The names tests used before the actors; kept so that tests written meanwhile still run.
@pytest.fixture
def admin_user(alice) -> AbstractBaseUser:
    return alice


@pytest.fixture
def member_user(bob) -> AbstractBaseUser:
    return bob


@dataclass
class SimAgents:
    proc: procs.Proc
    first_port: int
    nodes: int
    token: str

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.first_port + i}" for i in range(self.nodes)]


@pytest.fixture
def sim_agents() -> Iterator[Callable[..., SimAgents]]:
    """Start a real simulator process serving ``nodes`` virtual nodes over HTTP."""
    started: list[procs.Proc] = []

    def start(
        nodes: int = 2, gpus: int = 4, interval: float = 0.2, *models: str,
        vendors: tuple[str, ...] = (),
    ) -> SimAgents:  # fmt: skip
        first = procs.free_ports(nodes)
        command = [
            procs.PYTHON,
            "-m",
            "agents.gpu_agent",
            "--backend",
            "sim",
            "--nodes",
            str(nodes),
            "--gpus",
            str(gpus),
            "--interval",
            str(interval),
            "--hostname",
            f"sim{first}",
            "--listen",
            f"127.0.0.1:{first}",
        ]
        # With vendors and no models, each vendor's node gets its vendor's usual card.
        for model in models or (
            () if vendors else ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
        ):
            command += ["--model", model]
        for vendor in vendors:
            command += ["--vendor", vendor]
        proc = procs.start("agent", command, procs.child_env(GPU_AGENT_TOKEN=AGENT_TOKEN))
        started.append(proc)
        proc.wait_for("gpu-agent listening on", count=nodes)
        return SimAgents(proc, first, nodes, AGENT_TOKEN)

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def prometheus(tmp_path) -> Iterator[Callable[[dict[str, list[str]]], str]]:
    """Start a real Prometheus scraping ``{job: [host:port, ...]}`` every second; its URL."""
    started: list[procs.Proc] = []

    def start(jobs: dict[str, list[str]], metrics_path: str = "/metrics") -> str:
        proc, url = procs.start_prometheus(tmp_path, jobs, metrics_path=metrics_path)
        started.append(proc)
        return url

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def child_env_for_test_db() -> dict[str, str]:
    """Environment for portal processes (daphne, Celery) that must see the test database."""
    return procs.child_env(
        DATABASE_URL=procs.database_url(settings.DATABASES["default"]),
        REDIS_URL=settings.REDIS_URL,
        GPU_POLL_INTERVAL="1",
        DJANGO_SETTINGS_MODULE="portal.settings",
        SECRET_KEY=os.environ.get("SECRET_KEY", "insecure-test-only-key"),
    )


# --- the browser ---------------------------------------------------------------------------
# Debian's Chromium, driven by Playwright (which cannot download its own browser here); the
# flags keep it off the network this machine does not have.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser() -> Iterator[Browser]:
    # Playwright's sync API keeps an event loop running in this thread, and Django
    # refuses ORM calls there: request this fixture after any that use the database.
    executable = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def raw_server() -> Iterator[Callable[..., raw_http.RawServer]]:
    """Loopback TCP servers that run ``handle`` for each connection (tests/raw_http.py)."""
    servers: list[raw_http.RawServer] = []

    def start(handle: raw_http.Handle, **kwargs) -> raw_http.RawServer:
        server = raw_http.RawServer(lambda conn, n: handle(server, conn, n), **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def dns(monkeypatch) -> Iterator[Callable[[str, list[str]], list[str]]]:
    """Names of our own under .test: ``dns(name, answers)`` makes each lookup of ``name``
    answer the next address in ``answers`` (the last one from then on); returns the log of
    lookups. Every other name resolves as usual."""
    real = socket.getaddrinfo
    answers: dict[str, list[str]] = {}
    lookups: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if isinstance(host, str) and host in answers:
            queue = answers[host]
            address = queue.pop(0) if len(queue) > 1 else queue[0]
            lookups.append(address)
            return real(address, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)

    def add(name: str, addresses: list[str]) -> list[str]:
        answers[name] = list(addresses)
        return lookups

    yield add
