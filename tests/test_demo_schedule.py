"""The demo (``manage.py demo``, the README's first command) as a child process on the test
database: its scheduled work runs on what it seeded, each outcome read from the database
(an escalation, an expiry, an idle verdict, an accounting day), only the slices' owners
ever run anything, and a restart tells nothing twice."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import psutil
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from alerts.models import Event
from pools import launch as pools_launch
from pools.choices import LeaseState
from quotas import demo as quotas_demo
from quotas.choices import NoticeKind, RequestState
from quotas.models import GpuRequest, Notice, Tenant
from reports.models import AllocationIdle, UsageDay
from telemetry.models import OwnerMinute
from tests import procs

pytestmark = pytest.mark.stack


def _demo_command(tmp_path: Path) -> Callable[..., procs.Proc]:
    """``start(*args)``: the demo on the test database with in-process Redis, its var/ in
    tmp_path, short beat periods, four nodes (the four models the story asks for) of two
    cards, the hot node, and the Ascend and Hygon nodes."""
    env = procs.child_env(
        DATABASE_URL=procs.database_url(settings.DATABASES["default"]), REDIS_URL=None,
        SECRET_KEY="insecure-test-only-key", PORTAL_VAR_DIR=str(tmp_path / "var"),
        GPU_POLL_INTERVAL="1", REQUESTS_SWEEP_EVERY_S="2", REQUESTS_PLACE_EVERY_S="5",
        IDLE_SCAN_EVERY_S="5", TAKEBACK_EVERY_S="5", ACCOUNTING_EVERY_S="5",
    )  # fmt: skip
    port, agent_port = procs.free_port(), procs.free_ports(7)

    def start(*args: str) -> procs.Proc:
        return procs.start(
            "demo",
            [procs.PYTHON, "manage.py", "demo", "--port", str(port), "--agent-port",
             str(agent_port), "--nodes", "4", "--gpus", "2", *args],
            env,
        )  # fmt: skip

    return start


@pytest.fixture
def start_demo(transactional_db, tmp_path) -> Iterator[Callable[..., procs.Proc]]:
    """``start_demo(*args)``: the demo (``_demo_command``) up and serving; stopped at the
    end whatever happened."""
    command = _demo_command(tmp_path)
    started: list[procs.Proc] = []

    def start(*args: str) -> procs.Proc:
        demo = command(*args)
        started.append(demo)
        demo.wait_for("Press Ctrl+C to stop.", timeout=240)
        return demo

    yield start
    for demo in started:
        # Its exit waits for the simulators and a task in flight: more than 10 s when loaded.
        assert demo.stop(timeout=30) in (0, -15), "".join(demo.lines[-30:])


def _eventually(what: str, check: Callable[[], bool], demo: procs.Proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what}:\n" + "".join(demo.lines[-30:])
        time.sleep(1)


def test_the_demos_scheduled_work_runs(start_demo, tmp_path):
    demo = start_demo("--history-hours", "3")
    output = "".join(demo.lines)
    # The people's logins beside the admin's, their passwords kept under var/.
    for name in quotas_demo.PEOPLE:
        password = (Path(tmp_path) / "var" / f"demo-{name}-password").read_text().strip()
        assert f"or as {name} / {password} (" in output
        assert get_user_model().objects.get(username=name).check_password(password)
    [login] = [line for line in demo.lines if "Log in as" in line]
    assert re.search(r"Log in as admin / \S+", login)

    requests = {r.reason: r for r in GpuRequest.objects.all()}
    # The mixed fleet's pool: an Ascend slice placed at once by HAMi's Ascend names, a
    # Hygon whole card waiting for approval.
    npu = requests["Try the speech recognizer on an Ascend NPU."]
    assert npu.state == RequestState.ALLOCATED, npu.state
    allocation = npu.lease.allocations.get()
    assert (allocation.gpu.vendor, allocation.gpu.node.name) == ("ascend", "demo-ascend")
    assert "huawei.com/Ascend910B2" in pools_launch.kubernetes_limits(allocation)
    dcu = requests["Port the acoustic model to the Hygon DCU."]
    assert (dcu.state, dcu.pool.slug, dcu.whole_card) == (RequestState.PENDING, "domestic", True)
    waiting = requests["Full training run of the detector."]
    evaluation = requests["Evaluate last night's checkpoint."]
    # The sweep: the request pending for five hours is escalated, at once...
    _eventually("escalation", lambda: GpuRequest.objects.get(pk=waiting.pk).escalated_at,
                demo, 60)  # fmt: skip
    assert Notice.objects.filter(gpu_request=waiting, kind=NoticeKind.ESCALATED).exists()
    # ...and the evaluation, placed for two hours, expires a minute after the story.
    assert evaluation.expires_at > timezone.now() - timedelta(minutes=2)
    _eventually("expiry", lambda: GpuRequest.objects.get(pk=evaluation.pk).state
                == RequestState.EXPIRED, demo, 150)  # fmt: skip
    evaluation.refresh_from_db()
    assert evaluation.lease.state == LeaseState.RELEASED
    assert Notice.objects.filter(gpu_request=evaluation, kind=NoticeKind.EXPIRED).exists()

    # The idle scan: the approver's notebook, in which she runs nothing, is idle; the
    # developers' slices, whose jobs the simulator runs, are busy.
    def verdicts() -> dict[str, set[bool]]:
        out: dict[str, set[bool]] = {}
        for owner, idle in AllocationIdle.objects.values_list("lease__unix_user", "idle"):
            out.setdefault(owner, set()).add(idle)
        return out

    _eventually("idle verdict", lambda: verdicts().get(quotas_demo.IDLE_OWNER) == {True},
                demo, 60)  # fmt: skip
    assert verdicts() == {"mei": {True}, "ana": {False}, "ben": {False}}

    # The accounting: the GPU-hours per tenant of the days the filled history (3 hours)
    # covers, used hours from it; yesterday too when the test runs soon after midnight.
    slugs = dict(Tenant.objects.values_list("pk", "slug"))
    first_day = timezone.localdate(timezone.now() - timedelta(hours=3))

    def accounted() -> dict[str, float]:
        rows = UsageDay.objects.filter(day__gte=first_day)
        used: dict[str, float] = {}
        for tenant_id, hours in rows.values_list("tenant_id", "used_gpu_hours"):
            used[slugs[tenant_id]] = used.get(slugs[tenant_id], 0.0) + hours
        return used

    _eventually("accounting day", lambda: {"vision", "speech"} <= set(accounted()), demo, 60)
    assert UsageDay.objects.filter(day=timezone.localdate(), gpu_hours__gt=0).exists()

    def both_used() -> bool:
        used = accounted()
        return used.get("vision", 0) > 0 and used.get("speech", 0) > 0

    _eventually("used hours", both_used, demo, 90)
    assert accounted()["vision"] > 0 and accounted()["speech"] > 0

    # Nothing made up: only the slices' owners ever ran on a card, so no process outside
    # an allocation raised an alert.
    assert set(OwnerMinute.objects.values_list("owner", flat=True)) == {"ana", "ben"}
    assert not Event.objects.filter(rule__key="process-unallocated").exists()
    assert "Traceback" not in "".join(demo.lines), "".join(demo.lines[-30:])


def test_a_restarted_demo_tells_its_story_once(start_demo):
    first = start_demo("--history-hours", "1")
    assert any("Told the demo's day" in line for line in first.lines)
    assert any(re.search(r"History: 60 minute\(s\) filled", line) for line in first.lines)
    requests = GpuRequest.objects.count()
    assert first.stop(timeout=30) in (0, -15)
    again = start_demo("--history-hours", "1")
    assert not any("Told the demo's day" in line for line in again.lines)
    assert GpuRequest.objects.count() == requests
    # Only the minutes it was away are filled now.
    [history] = [line for line in again.lines if line.startswith("History:")] or ["History: 0"]
    assert int(re.search(r"History: (\d+)", history).group(1)) < 10
    assert "Traceback" not in "".join(first.lines + again.lines)


def test_a_demo_stopped_while_it_seeds_leaves_no_simulator_behind(transactional_db, tmp_path):
    # 36 hours of history to fill: SIGTERM comes while the demo is still starting, before
    # the web server's own handlers (the simulators are up since the first poll).
    demo = _demo_command(tmp_path)("--history-hours", "36")
    children: list[psutil.Process] = []
    try:
        demo.wait_for("Told the demo's day", timeout=240)
        children += psutil.Process(demo.popen.pid).children(recursive=True)
        # The fleet's simulator, the hot node's, and the Ascend and Hygon nodes'.
        assert len(children) == 3, children
        assert not any("GPU Portal is running" in line for line in demo.lines)
    finally:
        exit_code = demo.stop(timeout=30)
    _, alive = psutil.wait_procs(children, timeout=15)
    for orphan in alive:
        orphan.kill()
    assert alive == [], "".join(demo.lines[-30:])
    # It ends as SIGTERM asked, once it has stopped its children.
    assert exit_code == -15, "".join(demo.lines[-30:])
    assert "Traceback" not in "".join(demo.lines), "".join(demo.lines[-30:])
