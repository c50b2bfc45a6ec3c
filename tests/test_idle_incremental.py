"""The incremental idle scan (reports.window): a pass that starts from the minutes the
last one kept gives the verdicts, sparklines and cards a full pass gives on the same
data, from the same previous verdicts; it falls back to a full pass whenever what it
kept may be stale."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pools.choices import AllocationState
from pools.models import Allocation
from reports import scan, window
from reports.models import AllocationIdle, IdleCard, ReclaimPolicy
from telemetry.models import GpuMinute, OwnerMinute
from tests.factories import gpu_team, held_allocation

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(second=0, microsecond=0) - timedelta(days=1)


def _rows() -> tuple[dict, dict]:
    states = {
        r.allocation_id: tuple(getattr(r, f.attname) for f in r._meta.concrete_fields)
        for r in AllocationIdle.objects.all()
    }
    cards = {c.gpu_id: (c.state, c.users, c.scanned_at) for c in IdleCard.objects.all()}
    return states, cards


def _both(now):
    """An incremental pass at ``now``, then a full one from the same previous verdicts:
    (the incremental pass's result, its rows, the full pass's rows)."""
    kept = list(AllocationIdle.objects.all())
    kept_cards = list(IdleCard.objects.all())
    result = scan.scan(now, p95=False, incremental=True)
    incremental = _rows()
    AllocationIdle.objects.all().delete()
    AllocationIdle.objects.bulk_create(kept)
    IdleCard.objects.all().delete()
    IdleCard.objects.bulk_create(kept_cards)
    scan.scan(now, p95=False)
    return result, incremental, _rows()


def _differences(one, other) -> list:
    """(allocation or card, field, one's, other's) wherever the passes differ."""
    names = [f.attname for f in AllocationIdle._meta.concrete_fields]
    out = []
    for table, fields in ((0, names), (1, ["state", "users", "scanned_at"])):
        for key in one[table].keys() | other[table].keys():
            a, b = one[table].get(key), other[table].get(key)
            if a is None or b is None:
                out.append((key, "row", a, b))
                continue
            out += [(key, f, x, y) for f, x, y in zip(fields, a, b, strict=True) if x != y]
    return out


def _minutes(gpu, owners, start, end, util=0.0, memory=0.0, every=1):
    moments = [
        start + timedelta(minutes=m) for m in range(int((end - start) / timedelta(minutes=1)))
    ]
    GpuMinute.objects.bulk_create(
        GpuMinute(gpu=gpu, bucket=b, samples=12, util_avg=util, util_max=util,
                  memory_used_avg_mib=memory, memory_used_max_mib=memory)
        for i, b in enumerate(moments) if i % every == 0
    )  # fmt: skip
    OwnerMinute.objects.bulk_create(
        OwnerMinute(gpu=gpu, owner=o, bucket=b, samples=12, memory_used_avg_mib=memory,
                    memory_used_max_mib=memory)
        for o in owners for b in moments
    )  # fmt: skip


@pytest.fixture
def team():
    window.forget()
    yield gpu_team(cards=3)
    window.forget()


def _held(team, gpu, placed_at, **kw):
    return held_allocation(team.tenant, team.pool, team.dev, placed_at, gpu=gpu, **kw)


# --- hypothesis: any allocations, any minutes, passes at any steps -------------------------

card_minutes = st.lists(
    st.one_of(st.none(), st.sampled_from([0.0, 2.0, 4.9, 5.0, 37.5, 100.0])),
    min_size=0, max_size=40,
)  # fmt: skip


SLOW_OK = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=40, deadline=None, suppress_health_check=SLOW_OK)
@given(
    allocations=st.lists(
        st.tuples(st.integers(0, 2), st.booleans(), st.integers(0, 90),
                  st.sampled_from([1024, 4096, 16384]), st.booleans()),
        min_size=1, max_size=4,
    ),
    series=st.lists(st.tuples(card_minutes, st.sampled_from([0.0, 100.0, 3000.0])),
                    min_size=3, max_size=3),
    window_minutes=st.sampled_from([10, 30, 45]),
    steps=st.lists(
        st.tuples(st.integers(0, 20), st.sampled_from(["", "end", "resize", "new"])),
        min_size=1, max_size=3,
    ),
)  # fmt: skip
def test_an_incremental_pass_gives_what_a_full_pass_gives(
    team, allocations, series, window_minutes, steps
):
    with transaction.atomic():
        window.forget()
        ReclaimPolicy.objects.create(pool=team.pool, idle_window_minutes=window_minutes)
        cards = team.cards
        owners = {}
        held = []
        for card, whole, ago, memory, with_owner in allocations:
            allocation = _held(team, cards[card], NOW - timedelta(minutes=ago, seconds=17),
                               whole_card=whole, memory_mib=memory)  # fmt: skip
            held.append(allocation)
            if with_owner and not whole:
                owners.setdefault(card, set()).add(allocation.lease.unix_user)

        # Each card: a random run of minutes before NOW (gaps as None), then the same
        # pattern repeated after NOW, as the passes go on.
        def write(card, start, values, memory):
            gpu = cards[card]
            for i, util in enumerate(values):
                if util is None:
                    continue
                bucket = start + timedelta(minutes=i)
                GpuMinute.objects.create(gpu=gpu, bucket=bucket, samples=12, util_avg=util,
                                         util_max=util, memory_used_avg_mib=memory,
                                         memory_used_max_mib=memory)  # fmt: skip
                for owner in sorted(owners.get(card, ())):
                    if (i + len(owner)) % 3:
                        OwnerMinute.objects.create(gpu=gpu, owner=owner, bucket=bucket,
                                                   samples=12, memory_used_avg_mib=memory,
                                                   memory_used_max_mib=memory)  # fmt: skip

        for card, (values, memory) in enumerate(series):
            write(card, NOW - timedelta(minutes=len(values)), values, memory)
        scan.scan(NOW, p95=False, incremental=True)
        now = NOW
        for step, event in steps:
            for card, (values, memory) in enumerate(series):
                write(card, now, (values * 2)[:step], memory)
            now += timedelta(minutes=step)
            if event == "end" and held:
                Allocation.objects.filter(pk=held.pop().pk).update(state=AllocationState.RELEASED)
            elif event == "resize" and held:
                Allocation.objects.filter(pk=held[0].pk).update(memory_mib=2048)
            elif event == "new":
                held.append(_held(team, cards[0], now - timedelta(minutes=5)))
            # The last pass's time is its rows': with none left, the next pass is full.
            kept_any = AllocationIdle.objects.exists()
            result, incremental, full = _both(now)
            assert result.full is not kept_any
            assert _differences(incremental, full) == []
        transaction.set_rollback(True)


# --- the new path, case by case -----------------------------------------------------------


def test_new_minutes_only_are_read_and_the_verdicts_are_a_full_passs(team):
    busy = _held(team, team.cards[0], NOW - timedelta(hours=3))
    quiet = _held(team, team.cards[1], NOW - timedelta(hours=3), whole_card=True)
    _minutes(team.cards[0], [busy.lease.unix_user], NOW - timedelta(hours=3), NOW, 60.0, 3000.0)
    _minutes(team.cards[1], [], NOW - timedelta(hours=3), NOW)
    assert scan.scan(NOW, p95=False, incremental=True).full  # nothing kept yet: full
    _minutes(team.cards[0], [busy.lease.unix_user], NOW, NOW + timedelta(minutes=5), 60.0, 3000.0)
    _minutes(team.cards[1], [], NOW, NOW + timedelta(minutes=5))
    result, incremental, full = _both(NOW + timedelta(minutes=5))
    assert not result.full and result.idle == 1
    assert incremental == full
    assert incremental[0][quiet.pk][5] is True  # idle


def test_an_allocation_ended_since_the_last_pass_is_dropped(team):
    first = _held(team, team.cards[0], NOW - timedelta(hours=3))
    second = _held(team, team.cards[0], NOW - timedelta(hours=3))
    _minutes(team.cards[0], [first.lease.unix_user], NOW - timedelta(hours=3), NOW, 50.0, 10.0)
    scan.scan(NOW, p95=False, incremental=True)
    Allocation.objects.filter(pk=second.pk).update(state=AllocationState.RELEASED)
    _minutes(team.cards[0], [first.lease.unix_user], NOW, NOW + timedelta(minutes=4), 50.0, 10.0)
    result, incremental, full = _both(NOW + timedelta(minutes=4))
    assert not result.full
    assert incremental == full and set(incremental[0]) == {first.pk}


def test_a_resized_allocation_is_read_again_under_its_new_threshold(team):
    slice_ = _held(team, team.cards[0], NOW - timedelta(hours=3), memory_mib=65536)
    owner = slice_.lease.unix_user
    # 3,000 MiB used: under 10 % of 64 GiB (idle), over 10 % of 16 GiB (busy).
    _minutes(team.cards[0], [owner], NOW - timedelta(hours=3), NOW, 0.0, 3000.0)
    assert scan.scan(NOW, p95=False, incremental=True).idle == 1
    Allocation.objects.filter(pk=slice_.pk).update(memory_mib=16384)
    _minutes(team.cards[0], [owner], NOW, NOW + timedelta(minutes=5), 0.0, 3000.0)
    result, incremental, full = _both(NOW + timedelta(minutes=5))
    assert not result.full and result.idle == 0
    assert incremental == full


def test_a_busy_minute_sliding_out_of_the_window_makes_it_idle_as_in_a_full_pass(team):
    ReclaimPolicy.objects.create(pool=team.pool, idle_window_minutes=30)
    allocation = _held(team, team.cards[0], NOW - timedelta(hours=3), whole_card=True)
    _minutes(team.cards[0], [], NOW - timedelta(minutes=60), NOW - timedelta(minutes=31), 90.0)
    _minutes(team.cards[0], [], NOW - timedelta(minutes=31), NOW)
    scan.scan(NOW, p95=False, incremental=True)
    for step in range(1, 8):
        now = NOW + timedelta(minutes=step)
        _minutes(team.cards[0], [], now - timedelta(minutes=1), now)
        result, incremental, full = _both(now)
        assert not result.full
        assert incremental == full
    assert AllocationIdle.objects.get(pk=allocation.pk).idle


def test_a_pass_longer_after_than_the_window_is_full(team):
    _held(team, team.cards[0], NOW - timedelta(hours=3))
    _minutes(team.cards[0], [], NOW - timedelta(hours=3), NOW + timedelta(hours=3), 0.0)
    scan.scan(NOW, p95=False, incremental=True)
    assert scan.scan(NOW + timedelta(hours=3), p95=False, incremental=True).full


# Committed, as a flush's claim is: a claim of the test's own transaction stays unseen
# by every snapshot taken in it.
@pytest.mark.django_db(transaction=True)
def test_a_kept_minute_merged_again_makes_the_next_pass_full(team):
    _held(team, team.cards[0], NOW - timedelta(hours=3))
    _minutes(team.cards[0], [], NOW - timedelta(hours=3), NOW + timedelta(minutes=10))
    scan.scan(NOW, p95=False, incremental=True)
    late = int((NOW - timedelta(minutes=30)).timestamp()) // 60
    with connection.cursor() as cursor:  # as telemetry.rollups records a late claim
        cursor.execute(
            "INSERT INTO telemetry_rollupclaim (claim, minute) VALUES (%s, %s)",
            [f"gp:rollup:claim:{late}:{late + 40}:x", late + 40],
        )
    assert scan.scan(NOW + timedelta(minutes=5), p95=False, incremental=True).full
    # Merged before that pass's snapshot: the one after is incremental again.
    assert not scan.scan(NOW + timedelta(minutes=10), p95=False, incremental=True).full


def test_the_newest_minutes_merged_after_a_pass_are_read_again_without_a_full_pass(team):
    _held(team, team.cards[0], NOW - timedelta(hours=3))
    _minutes(team.cards[0], [], NOW - timedelta(hours=3), NOW)
    scan.scan(NOW, p95=False, incremental=True)
    recent = int((NOW - timedelta(minutes=1)).timestamp()) // 60
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO telemetry_rollupclaim (claim, minute) VALUES (%s, %s)",
            [f"gp:rollup:claim:{recent}:{recent + 1}:x", recent + 1],
        )
    _minutes(team.cards[0], [], NOW, NOW + timedelta(minutes=5))
    assert not scan.scan(NOW + timedelta(minutes=5), p95=False, incremental=True).full


def test_a_changed_window_a_pass_by_hand_or_the_hourly_p95s_read_everything(team):
    _held(team, team.cards[0], NOW - timedelta(hours=3))
    _minutes(team.cards[0], [], NOW - timedelta(hours=3), NOW + timedelta(minutes=30))
    scan.scan(NOW, p95=False, incremental=True)
    assert scan.scan(NOW + timedelta(minutes=5), p95=True, incremental=True).full
    assert not scan.scan(NOW + timedelta(minutes=10), p95=False, incremental=True).full
    ReclaimPolicy.objects.create(pool=team.pool, idle_window_minutes=180)
    assert scan.scan(NOW + timedelta(minutes=15), p95=False, incremental=True).full
    # Another pass wrote the verdicts since (not this state's): full.
    state = window.load()
    scan.scan(NOW + timedelta(minutes=20), p95=False)
    window.save(state)
    assert scan.scan(NOW + timedelta(minutes=25), p95=False, incremental=True).full


def test_beats_scan_is_incremental():
    from reports import tasks

    calls = []
    original = scan.scan

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    scan.scan = spy
    try:
        tasks.scan_and_reclaim()
    finally:
        scan.scan = original
    assert calls == [{"incremental": True}]
