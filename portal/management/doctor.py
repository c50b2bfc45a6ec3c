"""`manage.py doctor`: is this installation healthy? Each check is a plain function that
returns one or more ``Result`` lines (ok, warn or FAIL, and what to do), so each can be
tested alone on the real services; ``run_checks`` runs them all in order and skips the
checks whose store did not answer. docs/operations.md lists the checks.

In portal's wiring (it reads the agents' inventory and telemetry's public interface).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.cache import cache
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http.request import split_domain_port, validate_host
from django.utils import timezone
from django.utils.translation import gettext as _

from agents.models import Node
from portal import crypto
from telemetry import interface as telemetry

OK, WARN, FAIL = "ok", "warn", "FAIL"
# Django's own test of a weak SECRET_KEY (security.W009), and the keys this project's
# scripts and docs use for tests.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE = 5
INSECURE_MARKERS = ("django-insecure", "insecure", "changeme", "change-me")
# An agent whose clock is this far from the portal's: readings and alerts carry its time.
CLOCK_SKEW_WARN_S = 30.0
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}


@dataclass(frozen=True, slots=True)
class Result:
    name: str  # stable, for scripts: "database", "workers:polls", ...
    status: str  # OK, WARN or FAIL
    message: str
    hint: str = ""  # what to do, when not ok

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def production() -> bool:
    """Settings that are a demo's business only are faults here."""
    return not settings.DEBUG and not settings.EMBEDDED


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


# --- the stores ------------------------------------------------------------------------


def check_database(alias: str = DEFAULT_DB_ALIAS) -> Result:
    connection = connections[alias]
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        version = connection.pg_version if connection.vendor == "postgresql" else None
    except Exception as exc:
        return Result(
            "database",
            FAIL,
            _("the database does not answer: %(error)s") % {"error": _error(exc)},
            _("check DATABASE_URL and that PostgreSQL is running and reachable from here"),
        )
    where = connection.settings_dict
    text = _("PostgreSQL %(version)s answers at %(host)s:%(port)s/%(name)s") % {
        "version": f"{version // 10000}.{version % 10000}" if version else "?",
        "host": where.get("HOST") or "localhost",
        "port": where.get("PORT") or 5432,
        "name": where.get("NAME"),
    }
    return Result("database", OK, text)


def check_migrations(alias: str = DEFAULT_DB_ALIAS) -> Result:
    executor = MigrationExecutor(connections[alias])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _backwards in plan[:5])
        return Result(
            "migrations",
            FAIL,
            _("%(count)d migration(s) not applied: %(names)s")
            % {"count": len(plan), "names": names},
            _("run: manage.py migrate (before starting the new web and worker processes)"),
        )
    return Result("migrations", OK, _("all migrations applied"))


def check_cache() -> Result:
    if not settings.REDIS_URL:
        return Result(
            "redis",
            WARN,
            _("no REDIS_URL: the embedded in-process store"),
            _("production sets REDIS_URL (README)"),
        )
    key, value = f"doctor:{uuid.uuid4().hex}", uuid.uuid4().hex
    try:
        cache.set(key, value, timeout=30)
        got = cache.get(key)
        cache.delete(key)
    except Exception as exc:
        return Result(
            "redis",
            FAIL,
            _("Redis does not answer: %(error)s") % {"error": _error(exc)},
            _("check REDIS_URL and that Redis is running; pages and the API answer 503 meanwhile"),
        )
    if got != value:
        return Result(
            "redis",
            FAIL,
            _("Redis answered, but a value written was not read back"),
            _("check that Redis has not run out of RAM (maxmemory, eviction)"),
        )
    return Result("redis", OK, _("Redis answers (the cache: written, read and deleted)"))


def check_channel_layer(timeout: float = 3.0) -> Result:
    """A real group_send heard by a channel in the group: what a live page needs."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return Result(
            "channel-layer",
            FAIL,
            _("no channel layer configured"),
            _("CHANNEL_LAYERS is set from REDIS_URL in portal/settings.py"),
        )
    token = uuid.uuid4().hex

    async def round_trip() -> dict:
        channel = await layer.new_channel()
        group = f"doctor.{token}"
        await layer.group_add(group, channel)
        try:
            await layer.group_send(group, {"type": "doctor.ping", "token": token})
            return await layer.receive(channel)
        finally:
            await layer.group_discard(group, channel)

    async def bounded() -> dict:
        return await asyncio.wait_for(round_trip(), timeout)

    try:
        message = async_to_sync(bounded)()
    except Exception as exc:
        return Result(
            "channel-layer",
            FAIL,
            _("a group message did not come back: %(error)s") % {"error": _error(exc)},
            _("check Redis (REDIS_URL); live pages stop updating meanwhile"),
        )
    if message.get("token") != token:
        return Result(
            "channel-layer",
            FAIL,
            _("the channel layer delivered another message"),
            _("two deployments may share CHANNEL_LAYER_PREFIX on one Redis"),
        )
    return Result("channel-layer", OK, _("a group message went round the channel layer"))


def check_broker(timeout: float = 3.0) -> Result:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return Result(
            "broker",
            WARN,
            _("no broker: tasks run inside the web process (embedded)"),
            _("production sets REDIS_URL and runs Celery workers and beat"),
        )
    from portal.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0.2, timeout=timeout
            )
    except Exception as exc:
        return Result(
            "broker",
            FAIL,
            _("the Celery broker does not answer: %(error)s") % {"error": _error(exc)},
            _("check REDIS_URL and that Redis is running: no task is queued meanwhile"),
        )
    return Result("broker", OK, _("the Celery broker answers"))


def expected_queues() -> list[str]:
    return [queue.name for queue in settings.CELERY_TASK_QUEUES]


def check_workers(timeout: float = 1.0) -> list[Result]:
    """Which workers answer, per queue (Celery's remote control, ``inspect active_queues``)."""
    from portal.celery import app

    replies = app.control.inspect(timeout=timeout).active_queues() or {}
    consumers: dict[str, list[str]] = {name: [] for name in expected_queues()}
    for worker, queues in sorted(replies.items()):
        for queue in queues or ():
            consumers.setdefault(queue.get("name", "?"), []).append(worker)
    results = []
    for name, workers in consumers.items():
        if workers:
            results.append(
                Result(
                    f"workers:{name}",
                    OK,
                    _("queue %(queue)s: %(count)d worker(s) answered: %(workers)s")
                    % {"queue": name, "count": len(workers), "workers": ", ".join(workers)},
                )
            )
        else:
            results.append(
                Result(
                    f"workers:{name}",
                    FAIL,
                    _("queue %(queue)s: no worker answered within %(timeout)g s")
                    % {"queue": name, "timeout": timeout},
                    _("start one: celery -A portal worker -Q %(queue)s (docs/operations.md)")
                    % {"queue": name},
                )
            )
    return results


def beat_max_age() -> float:
    # Beat queues a poll every GPU_POLL_INTERVAL; several missed in a row is no accident.
    return max(60.0, 6 * settings.GPU_POLL_INTERVAL)


def check_beat(max_age: float | None = None) -> Result:
    """Beat keeps no heartbeat of its own; the poll it queues every GPU_POLL_INTERVAL is
    one: when telemetry last finished a poll cycle."""
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return Result("beat", OK, _("embedded: the schedule runs inside the web process"))
    max_age = beat_max_age() if max_age is None else max_age
    last = telemetry.last_poll_cycle()
    hint = _("run exactly one: celery -A portal beat; and a worker for the polls queue")
    if last is None:
        return Result(
            "beat",
            FAIL,
            _(
                "no poll cycle recorded: beat or the polls worker is not "
                "running (or Redis was emptied moments ago)"
            ),
            hint,
        )
    age = (timezone.now() - last).total_seconds()
    if age > max_age:
        return Result(
            "beat",
            FAIL,
            _("the last poll cycle finished %(age)d s ago (more than %(max)d s)")
            % {"age": age, "max": max_age},
            hint,
        )
    return Result("beat", OK, _("the last poll cycle finished %(age).1f s ago") % {"age": age})


# --- settings --------------------------------------------------------------------------


def weak_secret_key(key: str) -> bool:
    lowered = key.lower()
    return (
        len(key) < SECRET_KEY_MIN_LENGTH
        or len(set(key)) < SECRET_KEY_MIN_UNIQUE
        or any(marker in lowered for marker in INSECURE_MARKERS)
    )


def check_secret_key() -> list[Result]:
    hint = _(
        "set SECRET_KEY to a long random value, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
    results = []
    if weak_secret_key(settings.SECRET_KEY):
        status = FAIL if production() else WARN
        results.append(Result("secret-key", status, _("SECRET_KEY is a test or weak value"), hint))
    else:
        results.append(Result("secret-key", OK, _("SECRET_KEY is long and not a known default")))
    if settings.FIELD_ENCRYPTION_KEYS:
        results.append(
            Result(
                "encryption-key",
                OK,
                _("FIELD_ENCRYPTION_KEY is set (%(count)d key(s))")
                % {"count": len(settings.FIELD_ENCRYPTION_KEYS)},
            )
        )
    else:
        results.append(
            Result(
                "encryption-key",
                WARN if production() else OK,
                _("agent tokens are encrypted with a key derived from SECRET_KEY"),
                _(
                    "set FIELD_ENCRYPTION_KEY (docs/nodes.md) so that a new SECRET_KEY keeps "
                    "tokens readable"
                )
                if production()
                else "",
            )
        )
    return results


def check_debug() -> Result:
    if settings.DEBUG and not settings.EMBEDDED:
        return Result(
            "debug",
            FAIL,
            _("DEBUG is on with DATABASE_URL or REDIS_URL set"),
            _("unset DEBUG: error pages would show settings and code to anyone"),
        )
    return Result(
        "debug", OK, _("DEBUG is off") if not settings.DEBUG else _("DEBUG on (embedded)")
    )


def check_hosts() -> list[Result]:
    hosts, origins = list(settings.ALLOWED_HOSTS), list(settings.CSRF_TRUSTED_ORIGINS)
    results = []
    base = settings.PORTAL_BASE_URL
    base_host = base.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1] if base else ""
    if not hosts:
        results.append(
            Result(
                "allowed-hosts",
                FAIL,
                _("ALLOWED_HOSTS is empty: every request is refused"),
                _("set ALLOWED_HOSTS to the portal's host names"),
            )
        )
    elif "*" in hosts:
        results.append(
            Result(
                "allowed-hosts",
                WARN if production() else OK,
                _("ALLOWED_HOSTS accepts any host name (*)"),
                _("list the portal's host names in ALLOWED_HOSTS"),
            )
        )
    elif base_host and not validate_host(split_domain_port(base_host)[0], hosts):
        results.append(
            Result(
                "allowed-hosts",
                FAIL,
                _("PORTAL_BASE_URL's host %(host)s is not in ALLOWED_HOSTS") % {"host": base_host},
                _("add it to ALLOWED_HOSTS: links in messages would answer 400"),
            )
        )
    elif production() and set(hosts) <= LOOPBACK_HOSTS:
        results.append(
            Result(
                "allowed-hosts",
                WARN,
                _("ALLOWED_HOSTS holds only local names: %(hosts)s") % {"hosts": ", ".join(hosts)},
                _("browsers reaching the portal by its name get 400: add it to ALLOWED_HOSTS"),
            )
        )
    else:
        results.append(Result("allowed-hosts", OK, ", ".join(hosts)))
    bad = [o for o in origins if not o.startswith(("http://", "https://"))]
    plain = [o for o in origins if o.startswith("http://")]
    if bad:
        results.append(
            Result(
                "csrf-origins",
                FAIL,
                _("CSRF_TRUSTED_ORIGINS without a scheme: %(origins)s")
                % {"origins": ", ".join(bad)},
                _("write each as https://host[:port]"),
            )
        )
    elif plain and settings.BEHIND_TLS_PROXY:
        results.append(
            Result(
                "csrf-origins",
                WARN,
                _("plain http origins behind a TLS proxy: %(origins)s")
                % {"origins": ", ".join(plain)},
                _("browsers send https:// origins: write them so"),
            )
        )
    else:
        results.append(
            Result("csrf-origins", OK, ", ".join(origins) or _("none (same origin only)"))
        )
    return results


# --- the fleet -------------------------------------------------------------------------


def check_agents(minutes: float = 5.0) -> list[Result]:
    """How many nodes answered a poll in the last ``minutes``; agents' clocks against ours."""
    since = timezone.now() - timedelta(minutes=minutes)
    nodes = list(Node.objects.values_list("pk", "name", "last_seen"))
    if not nodes:
        return [
            Result(
                "agents",
                WARN,
                _("no nodes registered"),
                _("register nodes (docs/nodes.md) or import them (manage.py demo)"),
            )
        ]
    silent = [name for _pk, name, seen in nodes if seen is None or seen < since]
    counts = {"answered": len(nodes) - len(silent), "total": len(nodes), "minutes": minutes}
    text = _("%(answered)d of %(total)d nodes answered in the last %(minutes)g min") % counts
    if len(silent) == len(nodes):
        results = [
            Result(
                "agents",
                FAIL,
                text,
                _("no agent answers: check the polls worker, beat and the agents' network"),
            )
        ]
    elif silent:
        shown = ", ".join(sorted(silent)[:5]) + (" ..." if len(silent) > 5 else "")
        results = [
            Result("agents", WARN, f"{text}: {shown}", _("see each node's last error on its page"))
        ]
    else:
        results = [Result("agents", OK, text)]
    return results


def check_clock_skew(limit_s: float = CLOCK_SKEW_WARN_S) -> Result:
    """The agents' own clocks (their readings' collection time) against the portal's."""
    skews = {}
    node_ids = list(Node.objects.values_list("pk", flat=True))
    for node_id, reading in telemetry.latest(node_ids).items():
        if reading.collected_at is not None:
            skews[node_id] = reading.seen_at.timestamp() - reading.collected_at
    if not skews:
        return Result("clock-skew", OK, _("no fresh readings to compare clocks with"))
    worst = max(skews.values(), key=abs)
    if abs(worst) > limit_s:
        far = sum(abs(s) > limit_s for s in skews.values())
        names = dict(
            Node.objects.filter(
                pk__in=[k for k, s in skews.items() if abs(s) > limit_s]
            ).values_list("pk", "name")[:5]
        )
        return Result(
            "clock-skew",
            WARN,
            _(
                "%(count)d agent clock(s) off by more than %(limit)g s "
                "(worst %(worst)+.0f s): %(names)s"
            )
            % {"count": far, "limit": limit_s, "worst": worst, "names": ", ".join(names.values())},
            _(
                "run NTP (chrony, systemd-timesyncd) on the nodes and the portal's hosts; a "
                "reading far behind may also be an agent whose collection stalled"
            ),
        )
    return Result(
        "clock-skew",
        OK,
        _("agent clocks within %(worst).1f s of the portal's") % {"worst": abs(worst)},
    )


def check_agent_tokens() -> Result:
    """Every stored agent token opens with the configured keys (a restore without the key
    files, or a new SECRET_KEY without FIELD_ENCRYPTION_KEY, leaves them unreadable)."""
    stored = Node.objects.exclude(agent_token_encrypted="").values_list(
        "name", "agent_token_encrypted"
    )
    unreadable = []
    for name, ciphertext in stored.iterator():
        try:
            crypto.decrypt(ciphertext)
        except crypto.DecryptionError:
            unreadable.append(name)
    if unreadable:
        return Result(
            "agent-tokens",
            FAIL,
            _("%(count)d agent token(s) cannot be decrypted: %(names)s")
            % {"count": len(unreadable), "names": ", ".join(sorted(unreadable)[:5])},
            _(
                "restore the FIELD_ENCRYPTION_KEY (or SECRET_KEY) the tokens were stored with "
                "(docs/operations.md), or enter the tokens again"
            ),
        )
    return Result("agent-tokens", OK, _("every stored agent token decrypts"))


# --- the host --------------------------------------------------------------------------


def check_smtp(timeout: float = 3.0) -> Result:
    from django.core.mail import get_connection

    backend = settings.EMAIL_BACKEND
    if not backend.endswith("smtp.EmailBackend"):
        return Result("smtp", OK, _("mail goes to %(backend)s") % {"backend": backend})
    where = f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    # The default (localhost:25, no login) is "not configured": a warning, not a fault.
    configured = settings.EMAIL_HOST != "localhost" or settings.EMAIL_HOST_USER
    try:
        connection = get_connection(fail_silently=False, timeout=timeout)
        connection.open()
        connection.close()
    except Exception as exc:
        return Result(
            "smtp",
            FAIL if configured else WARN,
            _("no SMTP server at %(where)s: %(error)s") % {"where": where, "error": _error(exc)},
            _(
                "set EMAIL_HOST, EMAIL_PORT (and EMAIL_HOST_USER, EMAIL_USE_TLS); email alert "
                "channels fail until then"
            ),
        )
    return Result(
        "smtp", OK, _("the SMTP server at %(where)s accepts a session") % {"where": where}
    )


def check_disk(
    path: Path | None = None,
    *,
    warn_free: float = 0.10,
    fail_free: float = 0.02,
    warn_bytes: int = 1 << 30,
    fail_bytes: int = 200 << 20,
) -> Result:
    path = Path(path or settings.VAR_DIR)
    usage = shutil.disk_usage(path)
    share = usage.free / usage.total if usage.total else 0.0
    text = _("%(free).1f GiB free of %(total).1f GiB (%(pct).0f%%) under %(path)s") % {
        "free": usage.free / 2**30,
        "total": usage.total / 2**30,
        "pct": share * 100,
        "path": path,
    }
    hint = _("free space on that file system (PORTAL_VAR_DIR)")
    if share < fail_free or usage.free < fail_bytes:
        return Result("disk", FAIL, text, hint)
    if share < warn_free or usage.free < warn_bytes:
        return Result("disk", WARN, text, hint)
    return Result("disk", OK, text)


# --- all of them -----------------------------------------------------------------------


def _skipped(name: str, why: str) -> Result:
    return Result(name, WARN, _("not checked: %(why)s") % {"why": why})


def _guarded(name: str, check: Callable[[], Result | list[Result]]) -> list[Result]:
    try:
        found = check()
    except Exception as exc:
        return [
            Result(name, FAIL, _("the check itself failed: %(error)s") % {"error": _error(exc)})
        ]
    return found if isinstance(found, list) else [found]


def bounded(name: str, check: Callable[[], Result | list[Result]], seconds: float) -> list[Result]:
    """``check`` in a thread of its own, given up after ``seconds``: a host that drops
    packets (a firewall) would otherwise hold a connect for minutes, and a probe longer."""
    found: list[Result] = []

    def run() -> None:
        try:
            found.extend(_guarded(name, check))
        finally:
            connections.close_all()  # the thread's own connections

    thread = threading.Thread(target=run, name=f"doctor-{name}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive() or not found:
        return [
            Result(
                name,
                FAIL,
                _("no answer within %(seconds)g s") % {"seconds": seconds},
                _("the service may be unreachable: a firewall dropping packets, a host down"),
            )
        ]
    return found


def run_checks(*, minutes: float = 5.0, timeout: float = 3.0) -> list[Result]:
    """Every check in order; those that need a store that did not answer are skipped."""
    bound = timeout * 2 + 5  # each check's own timeouts end it first

    def each(name: str, check: Callable[[], Result | list[Result]]) -> list[Result]:
        return bounded(name, check, bound)

    results: list[Result] = []
    database = each("database", check_database)
    results += database
    db_up = database[0].status == OK
    no_db = _("the database does not answer")
    results += each("migrations", check_migrations) if db_up else [_skipped("migrations", no_db)]
    redis = each("redis", check_cache)
    results += redis
    redis_up = redis[0].status != FAIL
    no_redis = _("Redis does not answer")
    results += (
        each("channel-layer", lambda: check_channel_layer(timeout))
        if redis_up
        else [_skipped("channel-layer", no_redis)]
    )
    broker = each("broker", lambda: check_broker(timeout))
    results += broker
    if broker[0].status == OK:
        results += each("workers", lambda: check_workers(min(timeout, 1.0)))
    elif broker[0].status == FAIL:
        no_broker = _("the broker does not answer")
        results += [_skipped(f"workers:{q}", no_broker) for q in expected_queues()]
    results += each("beat", check_beat) if redis_up else [_skipped("beat", no_redis)]
    results += _guarded("secret-key", check_secret_key)
    results += _guarded("debug", check_debug)
    results += _guarded("allowed-hosts", check_hosts)
    if db_up:
        results += each("agents", lambda: check_agents(minutes))
        results += each("agent-tokens", check_agent_tokens)
    else:
        results += [_skipped("agents", no_db), _skipped("agent-tokens", no_db)]
    if db_up and redis_up:
        results += each("clock-skew", check_clock_skew)
    else:
        results.append(_skipped("clock-skew", no_db if not db_up else no_redis))
    results += each("smtp", lambda: check_smtp(timeout))
    results += _guarded("disk", check_disk)
    return results


def failed(results: Iterable[Result]) -> bool:
    return any(r.status == FAIL for r in results)
