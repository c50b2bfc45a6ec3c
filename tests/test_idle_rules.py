"""The idle rules (reports.idle) over plain data: no database, hypothesis where it helps.

``judge`` and ``right_size`` are what the scan runs, on what PostgreSQL summed of each
allocation's minutes (``Seen``); the summing itself, the sparklines and the week's p95s are
SQL, tested through the scan in tests/test_idle_reclaim.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from reports.idle import AllocationUse, Seen, Thresholds, judge, right_size

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RULES = Thresholds()  # 5 %, 10 %, 2 hours


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def use(*, placed_hours: float = 5, memory_mib: int = 10240, **kwargs) -> AllocationUse:
    return AllocationUse(
        allocation_id=1, compute_pct=50, memory_mib=memory_mib, whole_card=False,
        placed_at=NOW - timedelta(hours=placed_hours), **kwargs,
    )  # fmt: skip


def quiet(minutes: int = 180, read: int = 120) -> Seen:
    """Read every minute of the last ``minutes``, none busy (``read`` of them in the window)."""
    return Seen(last_busy=None, first_read=ago(minutes), read_in_window=read)


def test_an_allocation_under_both_thresholds_for_the_window_is_idle():
    result = judge(use(), quiet(), RULES, NOW)
    assert result.idle and result.idle_minutes == 180 and result.idle_since == ago(180)
    assert result.wasted_gpu_hours == 1.5  # 3 hours of half a card
    assert result.coverage == 1.0


def test_a_whole_card_wastes_all_of_its_card():
    whole = AllocationUse(1, 30, 81920, True, NOW - timedelta(hours=6))
    assert judge(whole, quiet(), RULES, NOW).wasted_gpu_hours == 3.0


def test_one_busy_minute_starts_the_run_again():
    seen = Seen(last_busy=ago(61), first_read=ago(180), read_in_window=120)
    result = judge(use(), seen, RULES, NOW)
    assert not result.idle and result.quiet_since == ago(60) and result.idle_since is None


def test_an_allocation_younger_than_the_window_is_not_idle_yet():
    result = judge(use(placed_hours=1.5), quiet(90, read=90), RULES, NOW)
    assert not result.idle and result.quiet_since == ago(90) and result.coverage == 1.0


def test_unread_minutes_are_no_evidence():
    nothing = judge(use(), Seen(None, None, 0), RULES, NOW)
    assert not nothing.idle and nothing.quiet_since == NOW and nothing.coverage == 0
    # Less than half of the window read: not idle either.
    assert not judge(use(), quiet(read=40), RULES, NOW).idle
    assert judge(use(), quiet(read=60), RULES, NOW).idle


def test_the_agents_live_report_of_memory_in_use_outweighs_the_rollups():
    # A tenth of the allocation's 10 GiB is use.
    assert not judge(use(live_memory_mib=1024), quiet(), RULES, NOW).idle
    assert judge(use(live_memory_mib=1023), quiet(), RULES, NOW).idle
    assert judge(use(live_memory_mib=0), quiet(), RULES, NOW).idle


def test_a_run_seen_by_the_previous_scan_carries_on():
    result = judge(use(previous_since=ago(300)), quiet(120), RULES, NOW)
    assert result.idle_since == ago(300) and result.idle_minutes == 300
    # Never from before the allocation was placed.
    older = judge(use(placed_hours=4, previous_since=ago(600)), quiet(120), RULES, NOW)
    assert older.idle_since == ago(240)


minutes_ago = st.integers(0, 400)
# What the SQL sums reads: minutes since the allocation was placed (300 minutes ago).
since_placed = st.none() | st.integers(1, 300).map(ago)
seen = st.builds(
    Seen, last_busy=since_placed, first_read=since_placed, read_in_window=st.integers(0, 120)
)


@given(seen, st.integers(1, 119), st.none() | minutes_ago.map(ago))
def test_an_allocation_with_a_busy_minute_inside_the_window_is_never_idle(got, busy, before):
    got = Seen(ago(busy), got.first_read, got.read_in_window)
    assert not judge(use(previous_since=before), got, RULES, NOW).idle


@given(seen, st.none() | minutes_ago.map(ago), st.booleans())
def test_idle_time_and_waste_never_exceed_the_time_held(got, before, whole):
    held = AllocationUse(1, 50, 10240, whole, ago(300), previous_since=before)
    result = judge(held, got, RULES, NOW)
    assert 0 <= result.idle_minutes <= 300
    assert result.wasted_gpu_hours <= 300 / 60 * (1 if whole else 0.5) + 1e-9
    assert result.idle == (result.idle_since is not None)
    assert 0 <= result.coverage <= 1


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
