"""The monthly accounting (reports.accounting) on a hand-built month: GPU-hours held as
quotas count them, used and idle from the hour rollups, vGPU units, chargeback with the
idle cost apart, per day; queue waits; and the daily idle digest's signal."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from quotas.models import GpuRequest
from reports import accounting, digest, scan
from reports.interface import idle_digest
from reports.models import UnitPrice, UsageDay
from telemetry.models import GpuHour, GpuMinute, OwnerHour
from tests.factories import GPUFactory, PoolFactory, TenantFactory, UserFactory, held_allocation

pytestmark = pytest.mark.django_db

MONTH = date(2026, 10, 1)
T0 = timezone.make_aware(datetime(2026, 10, 3, 10, 0))


@pytest.fixture
def month(alice):
    """One tenant: a whole card held 5 hours (busy at 50 % for 3, then idle), and a 25 %
    slice held 4 hours whose owner ran 2 of them with the card at 80 %."""
    tenant, pool = TenantFactory(name="acme"), PoolFactory(name="p")
    dev = UserFactory(username="dev", password=None)
    whole_gpu, shared_gpu = GPUFactory(), GPUFactory()
    held_allocation(tenant, pool, dev, T0, T0 + timedelta(hours=5), whole_card=True,
                    memory_mib=81920, gpu=whole_gpu)  # fmt: skip
    held_allocation(tenant, pool, dev, T0, T0 + timedelta(hours=4), compute_pct=25,
                    memory_mib=8192, gpu=shared_gpu)  # fmt: skip
    for h in range(5):
        util = 50.0 if h < 3 else 0.0
        GpuHour.objects.create(gpu=whole_gpu, bucket=T0 + timedelta(hours=h), samples=720,
                               util_avg=util, memory_used_avg_mib=0)  # fmt: skip
    for h in range(4):
        GpuHour.objects.create(gpu=shared_gpu, bucket=T0 + timedelta(hours=h), samples=720,
                               util_avg=80.0, memory_used_avg_mib=4096)  # fmt: skip
        if h < 2:
            OwnerHour.objects.create(
                gpu=shared_gpu,
                owner="dev",
                samples=720,
                bucket=T0 + timedelta(hours=h),
                memory_used_avg_mib=2048,
            )
    UnitPrice.objects.create(pool=None, currency="CNY", per_gpu_hour=Decimal("2"))
    return tenant


def test_the_month_adds_up(month, alice):
    report = accounting.monthly(MONTH, alice)
    [line] = report.lines
    # Held: 5 h of a card + 4 h of a quarter = 6 GPU-hours, as quotas count them.
    assert line.gpu_hours == Decimal("6.0000")
    assert line.compute_pct_hours == Decimal("600.0000")
    assert line.memory_gib_hours == Decimal(5 * 80 + 4 * 8)
    # Used: 3 h at 50 % of the card; the slice's 2 h with its owner running, capped at its
    # 25 %: 1.5 + 0.5.
    assert line.used_gpu_hours == pytest.approx(2.0)
    assert line.used_memory_gib_hours == pytest.approx(2 * 2048 / 1024)
    # Idle: the card's last 2 h (a whole card each) and the slice's 2 h without its owner.
    assert line.idle_gpu_hours == pytest.approx(2 + 2 * 0.25)
    assert line.cost == Decimal("12.00")
    assert line.idle_cost == (Decimal("12") * Decimal("2.5") / 6).quantize(Decimal("0.01"))
    day = next(d for d in report.days if d["day"] == "2026-10-03")
    assert day["gpu_hours"] == 6.0 and day["used_gpu_hours"] == pytest.approx(2.0)
    assert sum(d["gpu_hours"] for d in report.days) == 6.0
    assert "acme" in accounting.csv_text(report)


def test_queue_waits_per_pool_and_tenant(month, alice):
    req = GpuRequest.objects.first()
    GpuRequest.objects.filter(pk=req.pk).update(queued_at=T0 - timedelta(minutes=30), placed_at=T0)
    [wait] = accounting.queue_waits(T0 - timedelta(days=1), T0 + timedelta(days=1), None)
    assert wait["tenant"] == "acme" and wait["requests"] == 1 and wait["avg_minutes"] == 30.0


def test_a_user_outside_the_tenant_sees_no_line(month, dave):
    assert accounting.monthly(MONTH, dave).lines == []


def test_the_daily_digest_is_a_signal_for_the_admins(
    month, alice, django_capture_on_commit_callbacks
):
    now = timezone.now().replace(second=0, microsecond=0)
    tenant = month
    gpu = GPUFactory()
    held_allocation(tenant, PoolFactory(), alice, now - timedelta(hours=3), gpu=gpu)
    GpuMinute.objects.bulk_create(
        GpuMinute(gpu=gpu, bucket=now - timedelta(minutes=m), samples=12, util_avg=0,
                  memory_used_avg_mib=0) for m in range(1, 150)
    )  # fmt: skip
    scan.scan(now)
    heard = []
    idle_digest.connect(lambda sender, **kw: heard.append(kw), weak=False, dispatch_uid="t")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            digest.send()
    finally:
        idle_digest.disconnect(dispatch_uid="t")
    [sent] = heard
    assert alice.pk in sent["recipient_ids"]
    [entry] = sent["digest"]["tenants"]
    assert entry["tenant"] == "acme" and entry["count"] == 1


def test_a_day_is_summed_once_and_again_the_same(month, alice):
    accounting.monthly(MONTH, alice)
    first = list(UsageDay.objects.exclude(tenant_id=0).values_list("day", "gpu_hours"))
    assert first == [(date(2026, 10, 3), Decimal("6.0000"))]
    assert accounting.materialize_day(date(2026, 10, 3)) == 1
    again = list(UsageDay.objects.exclude(tenant_id=0).values_list("day", "gpu_hours"))
    assert again == first
    # Every day of the month is marked done, nothing held or not.
    assert UsageDay.objects.filter(day__month=10).count() == 31
