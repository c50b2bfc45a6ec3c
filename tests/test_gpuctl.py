"""gpuctl end to end: the real command (``python -m gpuctl``, a child process) against a
live portal, with a real API token; what it did is read back from the database."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time

import pytest

from gpuctl.client import error_from
from pools import launch
from pools.models import Allocation
from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests.services import create_request, decide
from tests import procs
from tests.factories import gpu_team
from tokens.interface import issue

pytestmark = pytest.mark.django_db(transaction=True)
SLICE = ["--compute", "25", "--memory", "8G", "--hours", "2"]


@pytest.fixture
def team():
    # Within policy (one vGPU, up to 50 %, up to 8 h) a request is approved and placed at once.
    return gpu_team("ci", auto_approve_vgpus=1, auto_approve_compute_pct=50, auto_approve_hours=8)


@pytest.fixture
def cli(live_server, team, tmp_path):
    """Run gpuctl as the team's developer: ``cli("list", "--json")`` -> CompletedProcess."""
    _, key = issue(team.dev, name="ci")
    env = procs.child_env(GPUCTL_URL=live_server.url, GPUCTL_TOKEN=key,
                          GPUCTL_CONFIG=str(tmp_path / "gpuctl.conf"),
                          GPUCTL_TENANT=None, GPUCTL_POOL=None)  # fmt: skip

    def run(*args: str, token: str | None = None, timeout: float = 60, **overrides: str):
        this_env = {**env, **overrides, **({"GPUCTL_TOKEN": token} if token else {})}
        return subprocess.run(
            command(*args), env=this_env, cwd=procs.REPO, capture_output=True, text=True,
            timeout=timeout, check=False,
        )  # fmt: skip

    run.env = env
    return run


def command(*args: str) -> list[str]:
    return [procs.PYTHON, "-m", "gpuctl", *args]


def where(team) -> list[str]:
    return ["--tenant", team.tenant.slug, "--pool", team.pool.slug]


def pending(team) -> GpuRequest:
    """A request beyond the auto-approval policy: it waits for an approver."""
    return create_request(team.dev, tenant=team.tenant, pool=team.pool, compute_pct=80,
                          memory_mib=8192, duration_hours=2, reason="beyond policy")  # fmt: skip


def test_request_wait_env_eval_release(cli, team):
    asked = cli("request", *where(team), *SLICE, "--wait", "30", "--json")
    assert asked.returncode == 0, asked.stderr
    req = json.loads(asked.stdout)
    assert req["state"] == "allocated" and req["compute_pct"] == 25 and req["memory_mib"] == 8192
    lease = GpuRequest.objects.get(pk=req["id"]).lease_id
    allocation = Allocation.objects.select_related("gpu", "lease").get(lease=lease)
    expected = launch.launch_env(allocation)

    waited = cli("wait", str(req["id"]), "--timeout", "5")
    assert waited.returncode == 0 and "allocated" in waited.stdout
    # The export lines, eval'd by a shell, reach the shell's children.
    shell = ["sh", "-c", 'eval "$("$@")" && env', "sh", *command("env", str(req["id"]))]
    child = subprocess.run(shell, env=cli.env, cwd=procs.REPO, capture_output=True, text=True,
                           timeout=60, check=True)  # fmt: skip
    seen = dict(line.split("=", 1) for line in child.stdout.splitlines() if "=" in line)
    assert expected and {name: seen.get(name) for name in expected} == expected

    released = cli("release", str(req["id"]), "--json")
    assert released.returncode == 0, released.stderr
    assert json.loads(released.stdout)["state"] == "released"
    assert GpuRequest.objects.get(pk=req["id"]).state == RequestState.RELEASED
    # Releasing again (a CI retry) is no error: the request is already over.
    assert cli("release", str(req["id"])).returncode == 0


def test_wait_returns_when_an_approver_approves_meanwhile(cli, team):
    req = pending(team)
    waiting = subprocess.Popen(command("wait", str(req.pk), "--timeout", "60", "--json"),
                               env=cli.env, cwd=procs.REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        time.sleep(1.5)
        assert waiting.poll() is None, waiting.communicate()
        decide(req.pk, team.approver, approve=True, comment="go")
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()
    assert waiting.returncode == 0, err
    assert json.loads(out)["state"] == "allocated"


def test_wait_gives_up_with_code_4(cli, team):
    req = pending(team)
    waited = cli("wait", str(req.pk), "--timeout", "1")
    assert waited.returncode == 4 and "timed out" in waited.stderr
    assert GpuRequest.objects.get(pk=req.pk).state == RequestState.PENDING


def test_a_rejected_request_ends_the_wait_with_code_6(cli, team):
    req = pending(team)
    decide(req.pk, team.approver, approve=False, comment="no")
    waited = cli("wait", str(req.pk), "--timeout", "30")
    assert waited.returncode == 6 and "rejected" in waited.stderr


def test_run_releases_after_a_failing_command_and_returns_its_code(cli, team):
    script = 'test -n "$CUDA_VISIBLE_DEVICES" && test -n "$GPU_PORTAL_ALLOCATION" && exit 7'
    ran = cli("run", *where(team), *SLICE, "--", "sh", "-c", script)
    assert ran.returncode == 7, ran.stderr
    [req] = GpuRequest.objects.filter(tenant=team.tenant)
    assert req.state == RequestState.RELEASED
    assert not Allocation.objects.filter(lease=req.lease, released_at__isnull=True).exists()


def test_run_releases_when_the_wait_times_out(cli, team):
    ran = cli("run", *where(team), "--compute", "80", "--hours", "1", "--wait", "1",
              "--", "true")  # fmt: skip
    assert ran.returncode == 4, ran.stderr
    [req] = GpuRequest.objects.filter(tenant=team.tenant)
    assert req.state == RequestState.CANCELLED


@pytest.mark.parametrize("while_", ["command runs", "waiting"])
def test_run_interrupted_by_sigint_releases(cli, team, while_):
    compute = "25" if while_ == "command runs" else "80"  # 80 %: beyond policy, it waits
    args = ["run", *where(team), "--compute", compute, "--memory", "1024", "--hours", "1",
            "--wait", "120", "--",
            "sh", "-c", "echo started; exec sleep 60"]  # fmt: skip
    proc = subprocess.Popen(command(*args), env=cli.env, cwd=procs.REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        if while_ == "command runs":
            assert proc.stdout.readline() == "started\n", proc.stderr.read()
        else:
            deadline = time.monotonic() + 30
            while not GpuRequest.objects.filter(tenant=team.tenant).exists():
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT
    [req] = GpuRequest.objects.filter(tenant=team.tenant)
    ended = RequestState.RELEASED if while_ == "command runs" else RequestState.CANCELLED
    assert req.state == ended


def test_every_verb_speaks_json(cli, team):
    asked = json.loads(cli("request", *where(team), *SLICE, "--json").stdout)
    ident = str(asked["id"])
    for args in (["status", ident], ["list"], ["list", "--mine", "--state", "allocated"],
                 ["nodes"], ["env", ident], ["wait", ident, "--timeout", "5"]):  # fmt: skip
        done = cli(*args, "--json")
        assert done.returncode == 0, (args, done.stderr)
        json.loads(done.stdout)
    [row] = json.loads(cli("list", "--json").stdout)
    assert row["id"] == asked["id"]
    assert "CUDA_VISIBLE_DEVICES" in json.loads(cli("env", ident, "--json").stdout)


def test_tenant_and_pool_by_id_and_by_name(cli, team):
    by_id = cli("request", "--tenant", str(team.tenant.pk), "--pool", str(team.pool.pk), *SLICE)
    assert by_id.returncode == 0, by_id.stderr
    by_name = cli("request", "--tenant", team.tenant.name.upper(), "--pool", team.pool.name,
                  *SLICE, "--json")  # fmt: skip
    assert by_name.returncode == 0, by_name.stderr
    unknown = cli("request", "--tenant", "nobody", "--pool", team.pool.slug, *SLICE)
    assert unknown.returncode == 2 and "nobody" in unknown.stderr


def test_a_bad_token_exits_3_with_a_clear_message(cli, team):
    for verb in (["list"], ["request", "--tenant", "1", "--pool", "1", *SLICE]):
        done = cli(*verb, token="gpp_deadbeef_not-a-real-key")
        assert done.returncode == 3, done.stderr
        assert done.stderr.startswith("gpuctl: ") and "token" in done.stderr.lower()
    assert not GpuRequest.objects.exists()


@pytest.mark.parametrize(
    ("size", "field"),
    [(["--compute", "150"], "compute_pct"), (["--memory", "0"], "memory_mib"),
     (["--count", "0"], "count"), (["--hours", "0"], "duration_hours")],
)  # fmt: skip
def test_a_bad_size_exits_2_with_the_field_error(cli, team, size, field):
    done = cli("request", *where(team), "--compute", "25", *size)
    assert done.returncode == 2
    assert f"  {field}: " in done.stderr
    as_json = json.loads(cli("request", *where(team), "--compute", "25", *size, "--json").stderr)
    assert field in as_json["error"]["fields"]
    assert not GpuRequest.objects.exists()


def test_configure_keeps_the_token_for_its_owner_alone(cli, team, live_server, tmp_path):
    key = cli.env["GPUCTL_TOKEN"]
    env = {**cli.env, "GPUCTL_URL": "", "GPUCTL_TOKEN": ""}
    saved = subprocess.run(command("configure", "--url", live_server.url, "--token-stdin"),
                           input=key + "\n", env=env, cwd=procs.REPO, capture_output=True,
                           text=True, timeout=60, check=False)  # fmt: skip
    assert saved.returncode == 0, saved.stderr
    path = tmp_path / "gpuctl.conf"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    listed = subprocess.run(command("list"), env=env, cwd=procs.REPO, capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    refused = subprocess.run(
        command("configure", "--url", live_server.url, "--token", "gpp_deadbeef_nope"),
        env=env, cwd=procs.REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 3 and key in path.read_text()


def test_an_unreachable_portal_exits_5(cli):
    port = procs.free_port()
    done = cli("list", GPUCTL_URL=f"http://127.0.0.1:{port}", timeout=120)
    assert done.returncode == 5 and "Cannot reach" in done.stderr


@pytest.mark.parametrize(
    "body",
    [b'{"error": {"code": "invalid", "message": "No.", "fields": {"count": ["Too small."]}}}',
     b'{"count": ["Too small."]}'],
)  # fmt: skip
def test_field_errors_read_from_either_error_shape(body):
    error = error_from(400, body)
    assert error.fields == {"count": ["Too small."]}
    assert "count: Too small." in str(error)
