"""A GPU request's whole life through the services: ask, approve (by hand or policy),
queue, place, extend, resize, release; escalation and expiry with time moved; the
GPU-hour budget; notices and the signal at each step."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from audit.interface import history_of
from pools.models import Allocation, PoolCard
from quotas.choices import NoticeKind, RequestState
from quotas.interface import request_event
from quotas.models import GpuRequest, Notice
from quotas.requests import lifecycle, services
from quotas.requests.services import create_request, decide, place_queued, queue_position
from quotas.tasks import place_all_queued, sweep_requests
from tests.factories import gpu_team

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    return gpu_team()


@pytest.fixture
def run_commits(django_capture_on_commit_callbacks, eager_tasks):
    """Run what each service schedules after commit (placement, and the notices' task:
    pushes, the signal)."""

    def run(call):
        with django_capture_on_commit_callbacks(execute=True):
            return call()

    return run


@pytest.fixture
def events():
    heard: list[dict] = []

    def listen(sender, **kwargs):
        heard.append(kwargs)

    request_event.connect(listen)
    yield heard
    request_event.disconnect(listen)


def kinds(user) -> list[str]:
    return list(Notice.objects.filter(recipient=user).order_by("id").values_list("kind", flat=True))


def test_a_request_is_approved_placed_and_released_with_the_requester_told_each_step(
    team, run_commits, events
):
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    assert req.state == RequestState.PENDING
    req = run_commits(lambda: decide(req.pk, team.approver, approve=True, comment="go"))
    req.refresh_from_db()
    assert req.state == RequestState.ALLOCATED
    assert req.expires_at == req.placed_at + timedelta(hours=4)
    [allocation] = Allocation.objects.filter(lease=req.lease)
    card = PoolCard.objects.get(gpu=allocation.gpu)
    assert (card.compute_allocated, card.memory_allocated_mib) == (25, 8192)
    run_commits(lambda: lifecycle.release_request(req.pk, team.dev))
    req.refresh_from_db()
    card.refresh_from_db()
    assert req.state == RequestState.RELEASED
    assert (card.compute_allocated, card.slices) == (0, 0)
    assert kinds(team.dev) == [NoticeKind.APPROVED, NoticeKind.PLACED]
    assert [e["kind"] for e in events] == ["created", "approved", "placed", "released"]
    assert events[1]["comment"] == "go" and events[1]["recipient_ids"] == {team.dev.pk}
    actions = list(history_of(req).values_list("action", flat=True))
    assert actions == ["request.create", "request.approve", "request.place", "request.released"]


def test_a_request_within_the_policy_is_approved_and_placed_at_once(run_commits):
    team = gpu_team(auto_approve_vgpus=1, auto_approve_compute_pct=50, auto_approve_hours=8)
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    req.refresh_from_db()
    assert req.state == RequestState.ALLOCATED and req.decided_by is None
    assert kinds(team.dev) == [NoticeKind.AUTO_APPROVED, NoticeKind.PLACED]


def test_a_request_within_the_policy_is_placed_in_the_create_itself(
    django_capture_on_commit_callbacks,
):
    """The answer to the create already says allocated: placement is in its transaction,
    not left to a queue walk after commit (which no callback runs here)."""
    team = gpu_team(auto_approve_vgpus=1, auto_approve_compute_pct=50, auto_approve_hours=8)
    with django_capture_on_commit_callbacks(execute=False):
        req = create_request(team.dev, **team.ask())
    assert req.state == RequestState.ALLOCATED and req.lease_id is not None
    assert GpuRequest.objects.get(pk=req.pk).state == RequestState.ALLOCATED
    actions = list(history_of(req).values_list("action", flat=True))
    assert actions == ["request.create", "request.approve", "request.place"]


def test_a_new_request_within_the_policy_does_not_pass_an_older_one_waiting(run_commits):
    """Capacity freed while an approved request waits (its walk not yet run) goes to that
    request first, not to a newer auto-approved one that would fit the same room."""
    team = gpu_team(
        cards=1, auto_approve_vgpus=1, auto_approve_compute_pct=60, auto_approve_hours=8
    )
    blocker = run_commits(lambda: create_request(team.dev, **team.ask(whole_card=True)))
    run_commits(lambda: decide(blocker.pk, team.approver, approve=True))
    older = run_commits(lambda: create_request(team.admin, **team.ask(compute_pct=60)))
    older.refresh_from_db()
    assert older.state == RequestState.APPROVED  # the card is held whole
    lifecycle.release_request(blocker.pk, team.dev)  # its queue walk is not run
    newer = run_commits(lambda: create_request(team.dev, **team.ask(compute_pct=60)))
    older.refresh_from_db()
    newer.refresh_from_db()
    assert (older.state, newer.state) == (RequestState.ALLOCATED, RequestState.APPROVED)
    assert queue_position(newer) == 1


@pytest.mark.parametrize(
    "ask", [{"count": 2}, {"compute_pct": 60}, {"duration_hours": 9}, {"duration_hours": None}]
)
def test_a_request_beyond_any_policy_threshold_waits_for_an_approver(run_commits, ask):
    team = gpu_team(auto_approve_vgpus=1, auto_approve_compute_pct=50, auto_approve_hours=8)
    req = run_commits(lambda: create_request(team.dev, **team.ask(**ask)))
    assert req.state == RequestState.PENDING


def test_an_approved_request_that_does_not_fit_waits_in_the_queue_and_is_placed_on_release(
    run_commits,
):
    team = gpu_team(cards=1)
    first = run_commits(lambda: create_request(team.dev, **team.ask(whole_card=True)))
    run_commits(lambda: decide(first.pk, team.approver, approve=True))
    second = run_commits(lambda: create_request(team.admin, **team.ask(compute_pct=50)))
    third = run_commits(lambda: create_request(team.dev, **team.ask(compute_pct=50)))
    for req in (second, third):
        run_commits(lambda req=req: decide(req.pk, team.approver, approve=True))
    second.refresh_from_db()
    third.refresh_from_db()
    assert (second.state, third.state) == (RequestState.APPROVED, RequestState.APPROVED)
    assert (queue_position(second), queue_position(third)) == (1, 2)
    run_commits(lambda: lifecycle.release_request(first.pk, team.dev))
    second.refresh_from_db()
    third.refresh_from_db()
    assert (second.state, third.state) == (RequestState.ALLOCATED, RequestState.ALLOCATED)


def test_a_higher_priority_request_goes_first_in_the_queue(run_commits):
    team = gpu_team(cards=1)
    blocker = run_commits(lambda: create_request(team.dev, **team.ask(whole_card=True)))
    run_commits(lambda: decide(blocker.pk, team.approver, approve=True))
    old = run_commits(lambda: create_request(team.dev, **team.ask(whole_card=True)))
    urgent = run_commits(lambda: create_request(team.admin, **team.ask(whole_card=True)))
    GpuRequest.objects.filter(pk=urgent.pk).update(priority=5)
    for req in (old, urgent):
        run_commits(lambda req=req: decide(req.pk, team.approver, approve=True))
    urgent.refresh_from_db()
    assert queue_position(urgent) == 1
    run_commits(lambda: lifecycle.release_request(blocker.pk, team.dev))
    urgent.refresh_from_db()
    old.refresh_from_db()
    assert (urgent.state, old.state) == (RequestState.ALLOCATED, RequestState.APPROVED)


def test_the_beat_places_what_capacity_freed_outside_a_release(run_commits):
    team = gpu_team(cards=1)
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    PoolCard.objects.update(cordoned_at=timezone.now())
    run_commits(lambda: decide(req.pk, team.approver, approve=True))
    req.refresh_from_db()
    assert req.state == RequestState.APPROVED
    PoolCard.objects.update(cordoned_at=None)
    assert run_commits(place_all_queued) == 1
    req.refresh_from_db()
    assert req.state == RequestState.ALLOCATED


def test_a_waiting_request_is_cancelled_and_its_quota_freed(run_commits):
    team = gpu_team(guaranteed_vgpus=1, limit_vgpus=2)
    req = run_commits(lambda: create_request(team.dev, **team.ask(count=2, compute_pct=100)))
    with pytest.raises(ValidationError):
        create_request(team.dev, **team.ask())
    run_commits(lambda: lifecycle.release_request(req.pk, team.dev))
    req.refresh_from_db()
    assert req.state == RequestState.CANCELLED
    assert create_request(team.dev, **team.ask()).state == RequestState.PENDING


def test_a_rejected_request_tells_the_requester_with_the_comment(team, run_commits):
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    run_commits(lambda: decide(req.pk, team.approver, approve=False, comment="not now"))
    notice = Notice.objects.get(recipient=team.dev)
    assert (notice.kind, notice.comment) == (NoticeKind.REJECTED, "not now")


# --- who may decide and act ------------------------------------------------------------------


def test_nobody_approves_their_own_request_but_a_platform_admin(team, alice, run_commits):
    own = run_commits(lambda: create_request(team.approver, **team.ask()))
    with pytest.raises(PermissionError):
        decide(own.pk, team.approver, approve=True)
    from tests.factories import MembershipFactory

    MembershipFactory(user=alice, tenant=team.tenant)
    mine = run_commits(lambda: create_request(alice, **team.ask()))
    assert run_commits(lambda: decide(mine.pk, alice, approve=True)).state == "approved"


@pytest.mark.parametrize("role", ["admin", "approver"])
def test_the_tenants_approvers_and_admins_decide(team, role, run_commits):
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    assert run_commits(lambda: decide(req.pk, getattr(team, role), approve=False)).state == (
        RequestState.REJECTED
    )


def test_a_member_or_another_tenants_approver_may_not_decide(team, run_commits):
    other = gpu_team()
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    for user in (team.dev, other.approver, other.admin):
        with pytest.raises(PermissionError):
            decide(req.pk, user, approve=True)
    req.refresh_from_db()
    assert req.state == RequestState.PENDING


def test_only_the_requester_the_tenant_admin_or_a_platform_admin_releases(team, alice, run_commits):
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    for user in (team.approver, gpu_team().admin):
        with pytest.raises(PermissionError):
            lifecycle.release_request(req.pk, user)
    assert run_commits(lambda: lifecycle.release_request(req.pk, team.admin)).state == "cancelled"
    assert kinds(team.dev) == [NoticeKind.CANCELLED]


# --- extend and resize -----------------------------------------------------------------------


def placed(team, run_commits, **ask) -> GpuRequest:
    req = run_commits(lambda: create_request(team.dev, **team.ask(**ask)))
    if req.state == RequestState.PENDING:
        run_commits(lambda: decide(req.pk, team.approver, approve=True))
    req.refresh_from_db()
    assert req.state == RequestState.ALLOCATED
    return req


def test_an_extension_within_the_policy_applies_at_once(run_commits):
    team = gpu_team(auto_approve_vgpus=1, auto_approve_compute_pct=50, auto_approve_hours=8)
    req = placed(team, run_commits, duration_hours=4)
    end = req.expires_at
    req = run_commits(lambda: lifecycle.extend_request(req.pk, team.dev, 3))
    assert (req.duration_hours, req.expires_at, req.extension_hours) == (
        7, end + timedelta(hours=3), None,
    )  # fmt: skip


def test_an_extension_beyond_the_policy_waits_for_an_approver(team, run_commits):
    req = placed(team, run_commits)
    end = req.expires_at
    req = run_commits(lambda: lifecycle.extend_request(req.pk, team.dev, 10))
    assert (req.extension_hours, req.expires_at) == (10, end)
    with pytest.raises(PermissionError):
        lifecycle.decide_extension(req.pk, team.dev, approve=True)
    req = run_commits(lambda: lifecycle.decide_extension(req.pk, team.approver, approve=True))
    assert (req.extension_hours, req.expires_at, req.duration_hours) == (
        None, end + timedelta(hours=10), 14,
    )  # fmt: skip
    assert NoticeKind.EXTENDED in kinds(team.dev)


def test_a_rejected_extension_leaves_the_end_where_it_was(team, run_commits):
    req = placed(team, run_commits)
    end = req.expires_at
    run_commits(lambda: lifecycle.extend_request(req.pk, team.dev, 10))
    req = run_commits(lambda: lifecycle.decide_extension(req.pk, team.admin, approve=False))
    assert (req.extension_hours, req.expires_at) == (None, end)
    assert kinds(team.dev)[-1] == NoticeKind.EXTENSION_REJECTED


@pytest.mark.parametrize("hours", [0, -3, "x", None, 24 * 366 + 1])
def test_an_extension_by_nonsense_hours_is_refused(team, run_commits, hours):
    req = placed(team, run_commits)
    with pytest.raises(ValidationError) as caught:
        lifecycle.extend_request(req.pk, team.dev, hours)
    assert "hours" in caught.value.message_dict
    req.refresh_from_db()
    assert req.extension_hours is None and req.duration_hours == 4


def test_a_resize_with_room_changes_the_slice_and_the_card(team, run_commits):
    req = placed(team, run_commits)
    req = run_commits(lambda: lifecycle.resize_request(req.pk, team.dev, compute_pct=40,
                                                       memory_mib=16384))  # fmt: skip
    allocation = Allocation.objects.get(lease=req.lease)
    card = PoolCard.objects.get(gpu=allocation.gpu)
    assert (allocation.compute_pct, allocation.memory_mib) == (40, 16384)
    assert (card.compute_allocated, card.memory_allocated_mib) == (40, 16384)


def test_a_resize_the_card_has_no_room_for_is_refused_and_changes_nothing(run_commits):
    team = gpu_team(cards=1)
    req = placed(team, run_commits)
    placed(team, run_commits, compute_pct=70)
    with pytest.raises(ValidationError) as caught:
        lifecycle.resize_request(req.pk, team.dev, compute_pct=40, memory_mib=8192)
    assert "no room" in caught.value.message_dict["compute_pct"][0]
    card = PoolCard.objects.get()
    assert card.compute_allocated == 95
    req.refresh_from_db()
    assert req.compute_pct == 25


def test_a_resize_larger_than_the_card_is_refused(team, run_commits):
    req = placed(team, run_commits)
    with pytest.raises(ValidationError) as caught:
        lifecycle.resize_request(req.pk, team.dev, compute_pct=25, memory_mib=90_000)
    assert "memory_mib" in caught.value.message_dict


# --- the GPU-hour budget ---------------------------------------------------------------------


def test_a_request_beyond_the_gpu_hour_budget_left_is_refused(run_commits):
    team = gpu_team(limit_gpu_hours=10)
    req = placed(team, run_commits, compute_pct=50, duration_hours=8)
    # Held for 10 hours at 50 %: 5 of the 10 GPU-hours used.
    Allocation.objects.filter(lease=req.lease).update(
        placed_at=timezone.now() - timedelta(hours=10)
    )
    with pytest.raises(ValidationError) as caught:
        create_request(team.dev, **team.ask(count=2, compute_pct=100, duration_hours=3))
    assert "budget" in caught.value.message_dict["duration_hours"][0]
    assert create_request(team.dev, **team.ask(compute_pct=100, duration_hours=4)).pk


def test_a_budget_of_zero_means_no_budget(run_commits):
    team = gpu_team(limit_gpu_hours=0)
    assert create_request(team.dev, **team.ask(count=2, compute_pct=100, duration_hours=8000))


# --- time: escalation, expiry, warnings ------------------------------------------------------


def test_a_request_pending_past_the_policy_is_escalated_to_the_tenant_admins_once(
    team, run_commits, events
):
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    assert run_commits(lambda: lifecycle.escalate_pending(timezone.now() + timedelta(hours=3))) == 0
    later = timezone.now() + timedelta(hours=5)
    assert run_commits(lambda: lifecycle.escalate_pending(later)) == 1
    assert run_commits(lambda: lifecycle.escalate_pending(later)) == 0
    req.refresh_from_db()
    assert req.escalated_at == later and req.state == RequestState.PENDING
    assert kinds(team.admin) == [NoticeKind.ESCALATED]
    assert kinds(team.approver) == []
    assert events[-1]["kind"] == "escalated"
    assert events[-1]["recipient_ids"] == {team.admin.pk, team.dev.pk}


def test_a_request_pending_past_the_expiry_policy_expires(team, run_commits):
    req = run_commits(lambda: create_request(team.dev, **team.ask()))
    assert run_commits(lambda: lifecycle.expire_pending(timezone.now() + timedelta(hours=71))) == 0
    assert run_commits(lambda: lifecycle.expire_pending(timezone.now() + timedelta(hours=73))) == 1
    req.refresh_from_db()
    assert req.state == RequestState.EXPIRED
    assert kinds(team.dev) == [NoticeKind.PENDING_EXPIRED]


def test_a_placed_request_is_warned_before_its_end_then_expired_and_its_capacity_freed(
    team, run_commits
):
    req = placed(team, run_commits)
    end = req.expires_at
    assert run_commits(lambda: lifecycle.warn_expiring(end - timedelta(hours=2))) == 0
    assert run_commits(lambda: lifecycle.warn_expiring(end - timedelta(minutes=30))) == 1
    assert run_commits(lambda: lifecycle.warn_expiring(end - timedelta(minutes=20))) == 0
    assert run_commits(lambda: lifecycle.expire_placed(end - timedelta(minutes=1))) == 0
    assert run_commits(lambda: lifecycle.expire_placed(end)) == 1
    req.refresh_from_db()
    assert req.state == RequestState.EXPIRED
    assert PoolCard.objects.filter(slices__gt=0).count() == 0
    assert kinds(team.dev)[-2:] == [NoticeKind.EXPIRING, NoticeKind.EXPIRED]


def test_the_sweep_task_runs_every_timed_step(team, run_commits):
    run_commits(lambda: create_request(team.dev, **team.ask()))
    assert run_commits(sweep_requests) == {
        "escalated": 0, "expired_pending": 0, "warned": 0, "expired": 0,
        "notices_resent": 0, "notice_keys_pruned": 0,
    }  # fmt: skip


def test_one_walk_of_a_pool_runs_at_a_time_and_goes_round_again_for_callers_meanwhile(
    monkeypatch,
):
    """Callers that find the pool's walk running return at once; the running walk goes
    round once more for all of them (the cache is the real one: Redis)."""
    walks: list[int] = []
    inside, go_on = threading.Event(), threading.Event()

    def slow_walk(pool_id: int, keep) -> int:
        walks.append(pool_id)
        if len(walks) == 1:
            inside.set()
            go_on.wait(10)
        return 1

    monkeypatch.setattr(services, "_walk", slow_walk)
    first: list[int] = []
    walker = threading.Thread(target=lambda: first.append(services.place_queued(7)))
    walker.start()
    assert inside.wait(10)
    assert services.place_queued(7) == 0
    assert services.place_queued(7) == 0
    assert services.place_queued(8) == 1  # another pool's walk is not held up
    go_on.set()
    walker.join(10)
    assert first == [2] and walks == [7, 8, 7]
    assert services.place_queued(7) == 1  # and the pool is free again


def test_a_walker_under_a_stream_of_callers_returns_after_its_rounds(monkeypatch):
    """Each round of the walk meets a new caller (a release): the walker stops after
    MAX_ROUNDS rather than serve them all, and the note left for the last is kept."""
    walks: list[int] = []

    def walk_meeting_a_release(pool_id: int, keep) -> int:
        walks.append(pool_id)
        assert services.place_queued(pool_id) == 0  # the walk is running: a note only
        return 0

    monkeypatch.setattr(services, "_walk", walk_meeting_a_release)
    services.place_queued(7)
    assert len(walks) == services.MAX_ROUNDS
    monkeypatch.setattr(services, "_walk", lambda pool_id, keep: walks.append(pool_id) or 1)
    assert services.place_queued(7) == 1


def test_a_walker_that_died_frees_its_pool_when_its_lease_runs_out(monkeypatch, settings):
    from django.core.cache import cache

    monkeypatch.setattr(services, "WALK_LEASE_SECONDS", 1)
    monkeypatch.setattr(services, "_walk", lambda pool_id, keep: 1)
    cache.add(services._WALKING_KEY.format(7), 1, timeout=1)  # a walker killed mid-walk
    assert services.place_queued(7) == 0
    time.sleep(1.2)
    assert services.place_queued(7) == 1


def test_a_create_that_found_the_cards_full_tries_again_after_its_commit(
    django_capture_on_commit_callbacks,
):
    """A release that commits between the create's placement attempt and its commit walks
    a queue the new request is not yet in: the create's own retry after commit places it."""
    team = gpu_team(
        cards=1, auto_approve_vgpus=1, auto_approve_compute_pct=60, auto_approve_hours=8
    )
    with django_capture_on_commit_callbacks(execute=True):
        blocker = create_request(team.dev, **team.ask(whole_card=True))
        decide(blocker.pk, team.approver, approve=True)
    with django_capture_on_commit_callbacks(execute=False) as after_create:
        req = create_request(team.dev, **team.ask(compute_pct=60))
    assert req.state == RequestState.APPROVED
    lifecycle.release_request(blocker.pk, team.dev)  # its walk (after commit) is not run
    for callback in after_create:
        callback()
    req.refresh_from_db()
    assert req.state == RequestState.ALLOCATED


def test_place_queued_on_a_pool_without_a_queue_places_nothing(team):
    assert place_queued(team.pool.pk) == 0


def test_whole_cards_larger_than_the_memory_quota_stay_queued_and_hold_nothing(run_commits):
    # Two 80 GiB cards, but the quota allows 100 GiB of memory: a whole card's memory is
    # known only once placed, so the placement is undone and the request keeps waiting.
    team = gpu_team(limit_memory_mib=100 * 1024, guaranteed_memory_mib=0)
    req = run_commits(
        lambda: create_request(
            team.dev, **team.ask(count=2, whole_card=True, compute_pct=100, memory_mib=1)
        )
    )
    run_commits(lambda: decide(req.pk, team.approver, approve=True))
    req.refresh_from_db()
    assert req.state == RequestState.APPROVED and req.lease_id is None
    assert not Allocation.objects.exists()
    assert set(PoolCard.objects.values_list("slices", "compute_allocated")) == {(0, 0)}
