"""The embedded default's PostgreSQL (portal.embedded_db): a real server from the wheel, its
data kept across restarts, refused with a clear message where its port or folder is taken,
and never left running by a portal that died."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from portal import embedded_db
from tests import procs


def _server(var: Path, port: int | None = None) -> embedded_db.Server:
    var.mkdir(mode=0o700, exist_ok=True)
    return embedded_db.Server(
        data_dir=var / "postgres", port=port or procs.free_port(), password="pw-" + var.name
    )


def _connect(server: embedded_db.Server, password: str | None = None, **kwargs):
    return psycopg.connect(
        host="127.0.0.1", port=server.port, user=embedded_db.USER, dbname=embedded_db.DATABASE,
        password=password or server.password, autocommit=True, connect_timeout=5, **kwargs,
    )  # fmt: skip


def _gone(pid: int, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_data_written_before_a_stop_is_there_after_the_next_start(tmp_path):
    server = _server(tmp_path / "var")
    with embedded_db.running(server):
        with _connect(server) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            conn.execute("CREATE TABLE kept (x integer)")
            conn.execute("INSERT INTO kept VALUES (42)")
        pid = server.process.pid
    assert _gone(pid), "the server still runs after stop()"
    assert version.startswith("18.")
    again = _server(tmp_path / "var", server.port)
    with embedded_db.running(again), _connect(again) as conn:
        assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]


def test_it_answers_on_loopback_with_its_password_only(tmp_path):
    server = _server(tmp_path / "var")
    with embedded_db.running(server):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(server, password="wrong")
        with _connect(server) as conn:
            listens = conn.execute("SHOW listen_addresses").fetchone()[0]
            sockets = conn.execute("SHOW unix_socket_directories").fetchone()[0]
    assert (listens, sockets) == ("127.0.0.1", "")


def test_a_taken_port_is_refused_with_the_setting_to_change_and_nothing_written(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", procs.free_port()))
    holder.listen()
    try:
        server = _server(tmp_path / "var", holder.getsockname()[1])
        with pytest.raises(embedded_db.EmbeddedDatabaseError, match="EMBEDDED_DB_PORT"):
            server.start()
    finally:
        holder.close()
    assert not server.data_dir.exists()


def test_a_folder_holding_something_else_is_refused_and_left_alone(tmp_path):
    server = _server(tmp_path / "var")
    server.data_dir.mkdir()
    (server.data_dir / "notes.txt").write_text("mine")
    with pytest.raises(embedded_db.EmbeddedDatabaseError, match="holds no PostgreSQL data"):
        server.start()
    assert [p.name for p in server.data_dir.iterdir()] == ["notes.txt"]


def test_a_folder_in_use_by_another_portal_is_refused(tmp_path):
    first = _server(tmp_path / "var")
    with embedded_db.running(first):
        second = _server(tmp_path / "var")
        with pytest.raises(embedded_db.EmbeddedDatabaseError, match=f"pid {first.process.pid}"):
            second.start()
        # The first one is untouched.
        with _connect(first) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_portal_killed_outright_takes_its_server_down_with_it(tmp_path):
    var = tmp_path / "var"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from portal import embedded_db\n"
        "s = embedded_db.Server(data_dir=Path(sys.argv[1]), port=int(sys.argv[2]), password='p')\n"
        "s.start()\n"
        "print(s.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    var.mkdir(mode=0o700)
    child = subprocess.Popen(
        [procs.PYTHON, "-c", script, str(var / "postgres"), str(procs.free_port())],
        cwd=procs.REPO, env=procs.child_env(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        postgres_pid = int(child.stdout.readline())
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        assert _gone(postgres_pid), "the server outlived the portal that started it"
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
