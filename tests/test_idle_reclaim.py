"""Simulated workloads (tests/idle_scenarios) through the scan and the reclaim policy:
busy allocations are never reported; idle ones are reported after the pool's window,
their owners warned, and released after the grace period unless exempt or appealed."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.interface import AuditEntry
from pools.choices import LeaseState
from pools.models import Lease
from quotas.choices import RequestState
from quotas.interface import TENANT, held_hours
from quotas.models import GpuRequest
from reports import scan, services
from reports.choices import WarningState
from reports.interface import appeal_event, reclaim_warned, reclaimed
from reports.models import AllocationIdle, Exemption, ReclaimPolicy, ReclaimWarning
from telemetry.models import GpuHour, OwnerHour
from tests.idle_scenarios import load, scenario

pytestmark = pytest.mark.django_db

BASIC = scenario("basic")


@pytest.fixture
def run_commits(django_capture_on_commit_callbacks):
    def run(call):
        with django_capture_on_commit_callbacks(execute=True):
            return call()

    return run


@pytest.fixture
def world(run_commits):
    loaded = load(BASIC, run_commits)
    ReclaimPolicy.objects.create(pool=loaded.team.pool, reclaim=True, grace_hours=24,
                                 idle_window_minutes=BASIC.WINDOW_MINUTES)  # fmt: skip
    return loaded


@pytest.fixture
def heard():
    got: list[tuple[str, dict]] = []

    def listener(name):
        def listen(sender, **kwargs):
            got.append((name, kwargs))

        return listen

    pairs = ((reclaim_warned, "warned"), (reclaimed, "reclaimed"), (appeal_event, "appeal"))
    listeners = {signal: listener(name) for signal, name in pairs}
    for signal, fn in listeners.items():
        signal.connect(fn)
    yield got
    for signal, fn in listeners.items():
        signal.disconnect(fn)


def _names(world, **filters) -> set[str]:
    ids = set(AllocationIdle.objects.filter(**filters).values_list("allocation_id", flat=True))
    return {name for name, a in world.allocations.items() if a.pk in ids}


def _scan(world) -> scan.ScanResult:
    """Two scans, 100 minutes apart, as beat runs them every few minutes: runs longer
    than one scan's range are carried from the earlier scan to the later."""
    scan.scan(world.now - timedelta(minutes=100))
    return scan.scan(world.now)


def _lease(world, name: str) -> Lease:
    return Lease.objects.get(pk=world.allocations[name].lease_id)


def test_the_scan_reports_idle_allocations_after_the_window_and_never_busy_ones(world):
    result = _scan(world)
    assert result.allocations == len(BASIC.ALLOCATIONS)
    assert _names(world, idle=True) == set(BASIC.IDLE_MINUTES)
    assert {"busy", "busy_slice", "recent"} <= _names(world, idle=False)
    for name, minutes in BASIC.IDLE_MINUTES.items():
        row = AllocationIdle.objects.get(allocation=world.allocations[name])
        assert row.idle_minutes == minutes
        assert row.idle_since == world.now - timedelta(minutes=minutes)
        assert row.wasted_gpu_hours == pytest.approx(BASIC.WASTED[name], abs=1e-4)
        assert len(row.sparkline) == scan.SPARK_POINTS


def test_an_idle_lease_is_warned_then_reclaimed_after_the_grace_period(world, heard, run_commits):
    _scan(world)
    services.add_exemption(_lease(world, "exempt").pk, world.team.admin, reason="month-end batch",
                           ends_at=world.now + timedelta(days=3))  # fmt: skip
    counts = run_commits(lambda: services.reclaim(world.now))
    assert counts["warned"] == 2  # idle and idle_slice; exempt is exempt
    warned = {w.lease_id for w in ReclaimWarning.objects.filter(state=WarningState.WARNED)}
    assert warned == {_lease(world, "idle").pk, _lease(world, "idle_slice").pk}
    assert [n for n, _ in heard] == ["warned", "warned"]
    # A second pass warns nobody twice; within the grace period nothing is released.
    assert run_commits(lambda: services.reclaim(world.now + timedelta(hours=23))) == {
        "warned": 0, "withdrawn": 0, "released": 0}  # fmt: skip
    assert run_commits(lambda: services.reclaim(world.now + timedelta(hours=25)))["released"] == 2
    for name in ("idle", "idle_slice"):
        assert _lease(world, name).state == LeaseState.RELEASED
        req = GpuRequest.objects.get(lease=_lease(world, name))
        assert req.state == RequestState.RELEASED
    for name in ("busy", "busy_slice", "exempt", "recent"):
        assert _lease(world, name).state == LeaseState.ACTIVE
    assert [n for n, _ in heard].count("reclaimed") == 2
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"reclaim.warn", "reclaim.release", "reclaim.exempt", "request.released"} <= actions


def test_a_lease_busy_again_has_its_warning_withdrawn(world):
    _scan(world)
    services.reclaim(world.now)
    AllocationIdle.objects.filter(allocation=world.allocations["idle"]).update(idle=False)
    assert services.reclaim(world.now + timedelta(hours=25))["withdrawn"] == 1
    assert _lease(world, "idle").state == LeaseState.ACTIVE


def test_an_appeal_holds_the_release_until_an_approver_decides(world, heard, run_commits):
    _scan(world)
    services.reclaim(world.now)
    warning = ReclaimWarning.objects.get(lease=_lease(world, "idle"))
    holder = world.holders["idle"]
    with pytest.raises(PermissionError):  # only the owner appeals
        services.appeal(warning.pk, world.team.dev, reason="x")
    run_commits(lambda: services.appeal(warning.pk, holder, reason="nightly job"))
    services.reclaim(world.now + timedelta(hours=25))
    assert _lease(world, "idle").state == LeaseState.ACTIVE
    with pytest.raises(PermissionError):  # the owner does not decide their own appeal
        services.decide_appeal(warning.pk, holder, grant=True)
    with pytest.raises(PermissionError):  # a plain member of the tenant does not either
        services.decide_appeal(warning.pk, world.team.dev, grant=True)
    run_commits(lambda: services.decide_appeal(warning.pk, world.team.approver, grant=True,
                                               comment="ok"))  # fmt: skip
    warning.refresh_from_db()
    assert warning.state == WarningState.GRANTED
    assert Exemption.objects.filter(lease=_lease(world, "idle")).exists()
    services.reclaim(world.now + timedelta(hours=26))
    assert _lease(world, "idle").state == LeaseState.ACTIVE
    assert ("appeal", True) in {(n, kw["decided"]) for n, kw in heard if n == "appeal"}


def test_a_refused_appeal_lets_the_release_go_on(world):
    _scan(world)
    services.reclaim(world.now)
    warning = ReclaimWarning.objects.get(lease=_lease(world, "idle"))
    services.appeal(warning.pk, world.holders["idle"], reason="please")
    services.decide_appeal(warning.pk, world.team.admin, grant=False)
    # idle, idle_slice and exempt (not exempted in this test)
    assert services.reclaim(world.now + timedelta(hours=25))["released"] == 3
    assert _lease(world, "idle").state == LeaseState.RELEASED


@pytest.mark.parametrize(
    "kwargs",
    [{"reason": ""}, {"reason": "x" * 501},
     {"reason": "ok", "ends_at": "not a date"}, {"reason": "ok", "ends_at": "2001-01-01T00:00Z"}],
)  # fmt: skip
def test_a_bad_exemption_is_refused_and_changes_nothing(world, kwargs):
    kwargs.setdefault("ends_at", (timezone.now() + timedelta(days=30)).isoformat())
    before = AuditEntry.objects.count()
    with pytest.raises(ValidationError):
        services.add_exemption(_lease(world, "idle").pk, world.team.admin, **kwargs)
    assert not Exemption.objects.exists() and AuditEntry.objects.count() == before


def test_a_member_may_not_exempt(world):
    with pytest.raises(PermissionError):
        services.add_exemption(_lease(world, "idle").pk, world.team.dev, reason="mine",
                               ends_at=world.now + timedelta(days=1))  # fmt: skip
    assert not Exemption.objects.exists()


def test_a_pool_without_reclaim_warns_nobody(world):
    ReclaimPolicy.objects.update(reclaim=False)
    _scan(world)
    assert services.reclaim(world.now)["warned"] == 0


def test_gpu_hours_held_match_the_scenario_to_the_minute(world):
    # Each allocation held from ``placed`` minutes ago: a whole card 1 GPU-hour an hour,
    # a slice its share.
    expected = sum(
        Decimal(spec["placed"]) / 60 * (1 if spec.get("whole_card") else
                                        Decimal(spec["compute_pct"]) / 100)
        for spec in BASIC.ALLOCATIONS.values()
    )  # fmt: skip
    held = held_hours((TENANT,), world.now - timedelta(hours=5), world.now)
    assert held[(world.team.tenant.pk,)].gpu_hours == expected.quantize(Decimal("0.0001"))


def test_the_scan_draws_each_allocations_window_from_its_own_minutes(world):
    _scan(world)
    judged = {
        name: AllocationIdle.objects.values("coverage", "sparkline", "quiet_since").get(
            allocation=allocation
        )
        for name, allocation in world.allocations.items()
    }
    steps = scan.SPARK_POINTS  # over the 2-hour window: 5 minutes each
    # A slice takes the card's utilization only while its owner runs something there.
    expected = {
        "busy": ([60.0] * steps, 0), "busy_slice": ([60.0] * steps, 0),
        "idle": ([1.0] * steps, 200), "exempt": ([1.0] * steps, 200),
        "idle_slice": ([0.0] * steps, 150),
        # Placed 90 minutes ago: nothing before it counts, read or not.
        "recent": ([None] * 6 + [0.0] * (steps - 6), 90),
    }  # fmt: skip
    for name, (line, quiet_minutes) in expected.items():
        assert judged[name]["sparkline"] == line, name
        assert judged[name]["quiet_since"] == world.now - timedelta(minutes=quiet_minutes), name
        assert judged[name]["coverage"] == 1.0, name  # every minute of its window was read


def test_the_weeks_p95s_come_from_the_hours_the_allocation_used(world):
    slice_ = world.allocations["busy_slice"]
    owner = world.holders["busy_slice"].get_username()
    hours = [world.now.replace(minute=0) - timedelta(hours=k) for k in range(1, 5)]
    GpuHour.objects.bulk_create(
        GpuHour(gpu_id=slice_.gpu_id, bucket=at, samples=720, util_avg=u, util_max=u)
        for at, u in zip(hours, (12, 8, 10, 6), strict=True)
    )  # fmt: skip
    OwnerHour.objects.bulk_create(
        OwnerHour(gpu_id=slice_.gpu_id, owner=owner, bucket=at, samples=720,
                  memory_used_avg_mib=m, memory_used_max_mib=m)
        for at, m in zip(hours, (3000, 1000, 2000, 500), strict=True)
    )  # fmt: skip
    scan.scan(world.now, p95=True)
    row = AllocationIdle.objects.get(allocation=slice_)
    # Nearest rank of four hours: the highest; half of what the slice holds is not reached.
    assert (row.p95_util_pct, row.p95_memory_mib) == (12.0, 3000.0)
    assert row.over_provisioned
    assert (row.advice_compute_pct, row.advice_memory_mib) == (15, 4096)
    busy = AllocationIdle.objects.get(allocation=world.allocations["busy"])
    assert (busy.p95_util_pct, busy.p95_memory_mib, busy.over_provisioned) == (None, None, False)
