"""Taking back borrowed capacity (#10): a tenant within its guarantee that waits in a
pool's queue gets the capacity other tenants borrowed above theirs, through the shared
reclaim flow (warn, grace period, release), and the queue then places its request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.interface import AuditEntry
from quotas.choices import NoticeKind, RequestState, Role
from quotas.models import GpuRequest, Notice
from quotas.requests.services import create_request, decide
from reports import takeback
from reports.choices import WarningCause, WarningState
from reports.interface import reclaim_warned, reclaimed
from reports.models import ReclaimPolicy, ReclaimWarning
from tests import clients
from tests.factories import MembershipFactory, QuotaFactory, TenantFactory, gpu_team

pytestmark = pytest.mark.django_db
HALF = {"compute_pct": 50, "memory_mib": 40960}


@pytest.fixture
def run_commits(django_capture_on_commit_callbacks):
    def run(call):
        with django_capture_on_commit_callbacks(execute=True):
            return call()

    return run


@pytest.fixture
def heard():
    got: list[tuple[str, dict]] = []

    def warned(sender, **kwargs):
        got.append(("warned", kwargs))

    def released(sender, **kwargs):
        got.append(("reclaimed", kwargs))

    reclaim_warned.connect(warned)
    reclaimed.connect(released)
    yield got
    reclaim_warned.disconnect(warned)
    reclaimed.disconnect(released)


@pytest.fixture
def world(run_commits):
    """Two 80 GiB cards. Lender (no guarantee) holds four half-card slices, all borrowed,
    placed one after another; Needy, guaranteed two vGPUs, holds nothing yet."""
    lender = gpu_team("Lender", cards=2, guaranteed_vgpus=0, guaranteed_compute_pct=0,
                      guaranteed_memory_mib=0)  # fmt: skip
    needy = TenantFactory(name="Needy-secret", slug="needy")
    QuotaFactory(tenant=needy, pool=lender.pool, guaranteed_vgpus=2, guaranteed_compute_pct=100,
                 guaranteed_memory_mib=2 * 40960)  # fmt: skip
    dev = MembershipFactory(tenant=needy, role=Role.MEMBER).user
    approver = MembershipFactory(tenant=needy, role=Role.APPROVER).user
    ReclaimPolicy.objects.create(pool=lender.pool, grace_hours=2)
    leases = []
    for _ in range(4):
        req = run_commits(lambda: create_request(lender.dev, **lender.ask(**HALF)))
        run_commits(lambda r=req: decide(r.pk, lender.approver, approve=True))
        req.refresh_from_db()
        assert req.state == RequestState.ALLOCATED and req.borrowed
        leases.append(req)
    return lender, needy, dev, approver, leases


def _wait_for_half(world, run_commits, **ask) -> GpuRequest:
    lender, needy, dev, approver, _ = world
    req = run_commits(
        lambda: create_request(dev, **{**lender.ask(**HALF), **ask, "tenant": needy})
    )  # fmt: skip
    run_commits(lambda: decide(req.pk, approver, approve=True))
    req.refresh_from_db()
    assert req.state == RequestState.APPROVED  # no room: it waits in the queue
    return req


def test_the_newest_borrowed_lease_alone_is_warned_released_after_the_grace_and_the_request_placed(
    world, run_commits, heard
):
    lender, _needy, _dev, _approver, leases = world
    req = _wait_for_half(world, run_commits)
    now = timezone.now() + timedelta(minutes=2)
    counts = run_commits(lambda: takeback.take_back(now))
    assert counts["warned"] == 1
    [warning] = ReclaimWarning.objects.all()
    assert warning.lease_id == leases[-1].lease_id  # the newest, and only it
    assert (warning.cause, warning.needed_by_id) == (WarningCause.BORROWED, req.pk)
    assert warning.release_after == now + timedelta(hours=2)
    assert [k for k, _ in heard] == ["warned"] and heard[0][1]["cause"] == "borrowed"
    assert heard[0][1]["lease_id"] == leases[-1].lease_id
    # A second pass warns nobody more: what is warned is enough.
    assert run_commits(lambda: takeback.take_back(now + timedelta(minutes=1)))["warned"] == 0
    # Within the grace period nothing is released.
    assert run_commits(lambda: takeback.take_back(now + timedelta(hours=1)))["released"] == 0
    req.refresh_from_db()
    assert req.state == RequestState.APPROVED
    counts = run_commits(lambda: takeback.take_back(now + timedelta(hours=2, minutes=1)))
    assert counts["released"] == 1
    warning.refresh_from_db()
    assert warning.state == WarningState.RELEASED
    states = dict(GpuRequest.objects.filter(tenant=lender.tenant).values_list("pk", "state"))
    assert states[leases[-1].pk] == RequestState.RELEASED
    assert all(states[r.pk] == RequestState.ALLOCATED for r in leases[:-1])
    req.refresh_from_db()
    assert req.state == RequestState.ALLOCATED and not req.borrowed
    assert [k for k, _ in heard] == ["warned", "reclaimed"]
    actions = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"reclaim.take_back", "reclaim.release"} <= actions
    entry = AuditEntry.objects.get(action="reclaim.take_back")
    assert "needed by tenant Needy-secret" in entry.message


def test_a_whole_card_takes_back_the_two_slices_of_one_card_not_more(world, run_commits):
    _lender, _needy, _dev, _approver, leases = world
    _wait_for_half(world, run_commits, whole_card=True, count=1)
    run_commits(lambda: takeback.take_back(timezone.now() + timedelta(minutes=2)))
    warned = set(ReclaimWarning.objects.values_list("lease_id", flat=True))
    # The two newest share a card (binpack filled the first card, then the second).
    assert warned == {leases[2].lease_id, leases[3].lease_id}


def test_a_tenant_above_its_guarantee_triggers_nothing(world, run_commits):
    _lender, needy, _dev, _approver, _leases = world
    needy.quotas.update(guaranteed_vgpus=0, guaranteed_compute_pct=0, guaranteed_memory_mib=0)
    _wait_for_half(world, run_commits)
    counts = run_commits(lambda: takeback.take_back(timezone.now() + timedelta(hours=5)))
    assert counts == {"warned": 0, "withdrawn": 0, "released": 0}
    assert not ReclaimWarning.objects.exists()


def test_nothing_happens_before_the_request_has_waited_and_never_to_its_own_tenant(
    world, run_commits
):
    lender, _needy, _dev, _approver, _leases = world
    # Lender itself waits within a (new) guarantee: its own borrowed leases are not taken.
    lender.quota.__class__.objects.filter(pk=lender.quota.pk).update(
        guaranteed_vgpus=8, guaranteed_compute_pct=800, guaranteed_memory_mib=8 * 81920
    )
    req = run_commits(lambda: create_request(lender.dev, **lender.ask(**HALF)))
    run_commits(lambda: decide(req.pk, lender.approver, approve=True))
    assert run_commits(lambda: takeback.take_back(timezone.now()))["warned"] == 0
    assert (
        run_commits(lambda: takeback.take_back(timezone.now() + timedelta(minutes=5)))["warned"]
        == 0
    )
    assert not ReclaimWarning.objects.exists()


def test_the_take_back_is_withdrawn_when_the_request_no_longer_waits(world, run_commits):
    _lender, _needy, dev, _approver, _leases = world
    from quotas.requests import lifecycle

    req = _wait_for_half(world, run_commits)
    now = timezone.now() + timedelta(minutes=2)
    run_commits(lambda: takeback.take_back(now))
    run_commits(lambda: lifecycle.release_request(req.pk, dev))  # cancelled
    counts = run_commits(lambda: takeback.take_back(now + timedelta(hours=3)))
    assert counts == {"warned": 0, "withdrawn": 1, "released": 0}
    assert GpuRequest.objects.filter(state=RequestState.ALLOCATED).count() == 4


def test_each_side_is_told_only_of_its_own_requests_and_never_the_other_tenants_name(
    world, run_commits
):
    lender, needy, dev, _approver, leases = world
    req = _wait_for_half(world, run_commits)
    run_commits(lambda: takeback.take_back(timezone.now() + timedelta(minutes=2)))
    lender_notice = Notice.objects.get(kind=NoticeKind.TAKE_BACK)
    assert lender_notice.recipient == lender.dev
    assert lender_notice.gpu_request_id == leases[-1].pk
    assert "Needy" not in lender_notice.comment
    needy_notice = Notice.objects.get(kind=NoticeKind.TAKING_BACK)
    assert (needy_notice.recipient, needy_notice.gpu_request_id) == (dev, req.pk)
    assert not Notice.objects.filter(recipient=dev, gpu_request__tenant=lender.tenant).exists()
    assert not Notice.objects.filter(
        recipient__memberships__tenant=lender.tenant, gpu_request__tenant=needy
    ).exists()
    client = clients.page(lender.dev)
    for url in ("/requests/", f"/requests/{leases[-1].pk}/", "/idle/"):
        body = client.get(url).content.decode()
        assert "Needy" not in body
    assert client.get(f"/requests/{req.pk}/").status_code == 404
