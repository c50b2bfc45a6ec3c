"""The idle rules (reports.idle) over plain data: no database, hypothesis where it helps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from reports.idle import (
    AllocationUse,
    Minute,
    Thresholds,
    p95,
    right_size,
    share,
    sparkline,
    verdict,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RULES = Thresholds()  # 5 %, 10 %, 2 hours


def use(minutes, *, placed_hours: float = 6, memory_mib: int = 10240, **kwargs) -> AllocationUse:
    return AllocationUse(
        allocation_id=1, compute_pct=50, memory_mib=memory_mib, whole_card=False,
        placed_at=NOW - timedelta(hours=placed_hours), minutes=tuple(minutes), **kwargs,
    )  # fmt: skip


def flat(util: float, memory: float, minutes: int = 180) -> list[Minute]:
    return [Minute(NOW - timedelta(minutes=m), util, memory) for m in range(1, minutes + 1)]


def test_an_allocation_under_both_thresholds_for_the_window_is_idle():
    result = verdict(use(flat(1, 100)), RULES, NOW)
    assert result.idle and result.idle_minutes == 180
    assert result.wasted_gpu_hours == 1.5  # 3 hours of half a card


def test_one_busy_minute_starts_the_run_again():
    minutes = flat(1, 100)
    minutes[60] = Minute(minutes[60].at, 50, 100)  # 61 minutes ago
    result = verdict(use(minutes), RULES, NOW)
    assert not result.idle and result.quiet_since == NOW - timedelta(minutes=60)


def test_memory_over_a_tenth_of_the_allocation_is_use():
    assert not verdict(use(flat(0, 1024)), RULES, NOW).idle
    assert verdict(use(flat(0, 1023)), RULES, NOW).idle


def test_an_allocation_younger_than_the_window_is_not_idle_yet():
    assert not verdict(use(flat(0, 0, 90), placed_hours=1.5), RULES, NOW).idle


def test_unread_minutes_are_no_evidence():
    assert not verdict(use([]), RULES, NOW).idle
    # Less than half of the window read: not idle either.
    sparse = [Minute(NOW - timedelta(minutes=m), 0, 0) for m in range(1, 121, 3)]
    assert not verdict(use(sparse), RULES, NOW).idle


def test_the_agents_live_report_of_memory_in_use_outweighs_the_rollups():
    assert not verdict(use(flat(0, 0), live_memory_mib=4096), RULES, NOW).idle
    assert verdict(use(flat(0, 0), live_memory_mib=0), RULES, NOW).idle


def test_a_run_seen_by_the_previous_scan_carries_on():
    earlier = NOW - timedelta(hours=5)
    result = verdict(use(flat(0, 0, 120), previous_since=earlier), RULES, NOW)
    assert result.idle_since == earlier and result.idle_minutes == 300


readings = st.lists(
    st.tuples(st.integers(1, 400), st.floats(0, 100), st.floats(0, 20000)),
    max_size=200,
)


@given(readings)
def test_an_allocation_with_a_busy_minute_inside_the_window_is_never_idle(rows):
    minutes = [Minute(NOW - timedelta(minutes=m), u, mem) for m, u, mem in rows]
    minutes.append(Minute(NOW - timedelta(minutes=30), 80, 0))
    assert not verdict(use(minutes), RULES, NOW).idle


@given(readings)
def test_idle_time_and_waste_never_exceed_the_time_held(rows):
    minutes = [Minute(NOW - timedelta(minutes=m), u, mem) for m, u, mem in rows]
    result = verdict(use(minutes, placed_hours=5), RULES, NOW)
    assert 0 <= result.idle_minutes <= 300
    assert result.wasted_gpu_hours <= 300 / 60 * share(50, False) + 1e-9
    assert result.idle == (result.idle_since is not None)


@given(st.lists(st.floats(0, 100) | st.none(), max_size=300))
def test_p95_is_one_of_the_values_and_at_least_95_percent_are_not_above_it(values):
    result = p95(values)
    present = [v for v in values if v is not None]
    if not present:
        assert result is None
        return
    assert result in present
    assert sum(v <= result for v in present) >= 0.95 * len(present)


def test_right_sizing_from_the_p95():
    advice = right_size(50, 16384, False, p95_util=12, p95_memory_mib=3000)
    assert advice.over_provisioned
    assert (advice.compute_pct, advice.memory_mib) == (15, 4096)
    assert not right_size(50, 16384, False, p95_util=40, p95_memory_mib=3000).over_provisioned
    assert right_size(50, 16384, False, None, None) is None


@given(st.integers(1, 100), st.integers(1, 200000), st.booleans(),
       st.floats(0, 100), st.floats(0, 300000))  # fmt: skip
def test_advice_never_suggests_more_than_is_held(compute, memory, whole, util, used):
    advice = right_size(compute, memory, whole, util, used)
    assert advice.compute_pct >= 5 or advice.compute_pct == compute
    assert advice.compute_pct <= (100 if whole else compute)
    assert advice.memory_mib <= memory


def test_the_sparkline_averages_each_step_and_leaves_gaps():
    minutes = [Minute(NOW - timedelta(minutes=m), 10 * (m % 2), 0) for m in range(1, 61)]
    line = sparkline(minutes, NOW - timedelta(hours=2), NOW, points=4)
    assert line[:2] == [None, None] and line[2] == 5.0 and line[3] == 5.0
