"""The demo's seeds, each app's own (``<app>/demo.py``): the teams and their day of requests
told through the services at the story's moments, once; the pool's reclaim policy and
prices; the history filled from the simulator through the rollups' own path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from agents.choices import NodeState
from agents.gpu_agent.desired import Slice
from agents.gpu_agent.replay import portal_views
from audit.models import AuditEntry
from pools import demo as pools_demo
from pools.choices import AllocationState
from pools.interface import Ask, place_lease, release_lease
from pools.models import Allocation
from quotas import demo as quotas_demo
from quotas.choices import RequestState, Role
from quotas.models import GpuRequest, Membership, Quota, Tenant
from reports import demo as reports_demo
from reports.models import ReclaimPolicy, UnitPrice
from telemetry import demo as telemetry_demo
from telemetry.models import GpuHour, GpuMinute, OwnerMinute
from tests.factories import GPUFactory, NodeFactory, PoolFactory

MODELS = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA L40S", "Tesla T4"]
MEMORY = {MODELS[0]: 81920, MODELS[1]: 81559, MODELS[2]: 46068, MODELS[3]: 15360}
NOW = datetime(2026, 11, 18, 15, 30, tzinfo=UTC)
PASSWORDS = {"mei": "mei-pw-1", "ana": "ana-pw-1", "ben": "ben-pw-1"}


@pytest.fixture
def fleet(transactional_db, settings):
    """An admin, the demo's people and the demo pool over four nodes, one per model."""
    settings.GPU_POLL_RETRIES = 0  # the nodes' agents are nowhere: one refused send each
    admin = get_user_model().objects.create_superuser("admin", password="admin-pw-1")
    quotas_demo.seed_people(PASSWORDS)
    for i, model in enumerate(MODELS):
        node = NodeFactory(name=f"demo-{i + 1:02d}", state=NodeState.ONLINE,
                           labels={"demo": "true"})  # fmt: skip
        for _ in range(6 if i == 0 else 3):
            GPUFactory(node=node, model=model, memory_total_mib=MEMORY[model])
    return admin, pools_demo.seed(admin, {"demo": "true"})


def _requests() -> dict[str, GpuRequest]:
    return {r.reason: r for r in GpuRequest.objects.select_related("requester", "tenant")}


def test_the_teams_and_their_day_are_told_once_through_the_services(fleet):
    admin, pool = fleet
    assert quotas_demo.seed_story(admin, pool, MODELS, now=NOW)
    assert timezone.now() > NOW + timedelta(days=1)  # the real clock is back
    roles = set(Membership.objects.values_list("tenant__slug", "user__username", "role"))
    assert roles == {
        ("vision", "admin", Role.ADMIN), ("vision", "mei", Role.APPROVER),
        ("vision", "ana", Role.MEMBER), ("speech", "admin", Role.ADMIN),
        ("speech", "mei", Role.APPROVER), ("speech", "ben", Role.MEMBER),
    }  # fmt: skip
    assert Quota.objects.filter(pool=pool).count() == 2
    requests = _requests()
    states = {reason: (r.requester.username, r.state) for reason, r in requests.items()}
    assert states == {
        "Train the detector on the new street-scene set.": ("ana", RequestState.ALLOCATED),
        "Throughput benchmark of the new acoustic model.": ("ben", RequestState.ALLOCATED),
        "Segmentation model, three cards data-parallel.": ("ana", RequestState.ALLOCATED),
        "A notebook to look through the labelled data.": ("mei", RequestState.ALLOCATED),
        "Serve the speech recognizer to the QA team.": ("ben", RequestState.ALLOCATED),
        "Hyper-parameter search.": ("ana", RequestState.REJECTED),
        "Train the new text-to-speech voice.": ("ben", RequestState.ALLOCATED),
        "Data augmentation workers.": ("ana", RequestState.ALLOCATED),
        "Learning-rate sweep.": ("ana", RequestState.RELEASED),
        "Full training run of the detector.": ("ana", RequestState.PENDING),
        "Evaluate last night's checkpoint.": ("ben", RequestState.ALLOCATED),
    }
    # Each step at its moment: the pending request is 5 hours old, and not yet escalated
    # (that is the sweep's work); the evaluation ends a minute after the story.
    pending = requests["Full training run of the detector."]
    assert (pending.created, pending.escalated_at) == (NOW - timedelta(hours=5), None)
    evaluation = requests["Evaluate last night's checkpoint."]
    assert evaluation.expires_at == NOW + timedelta(minutes=1)
    notebook = requests["A notebook to look through the labelled data."]
    assert notebook.decided_by == admin
    assert notebook.placed_at == NOW - timedelta(hours=20, minutes=50)
    assert {a.placed_at for a in notebook.lease.allocations.all()} == {notebook.placed_at}
    # The audit log says when each happened, as the services wrote it then.
    created = AuditEntry.objects.get(action="request.create", target_id=str(pending.pk))
    assert created.at == pending.created
    first = AuditEntry.objects.order_by("at").first()
    assert (first.action, first.at) == ("tenant.create", NOW - timedelta(hours=24))
    sweep = requests["Learning-rate sweep."]
    assert sweep.ended_at == NOW - timedelta(hours=7)
    assert sweep.lease.allocations.get().released_at == NOW - timedelta(hours=7)
    # The developers hold the live slices; the approver the one she never uses.
    live = Allocation.objects.filter(state=AllocationState.ACTIVE)
    owners = sorted(set(live.values_list("lease__unix_user", flat=True)))
    assert owners == ["ana", "ben", "mei"]
    assert live.filter(lease__unix_user=quotas_demo.IDLE_OWNER).count() == 1

    # A second start tells nothing again.
    count, audited = GpuRequest.objects.count(), AuditEntry.objects.count()
    assert not quotas_demo.seed_story(admin, pool, MODELS, now=NOW + timedelta(days=1))
    assert (GpuRequest.objects.count(), AuditEntry.objects.count()) == (count, audited)
    assert Tenant.objects.count() == 2


def test_a_step_the_fleet_cannot_hold_is_left_out(transactional_db, settings):
    settings.GPU_POLL_RETRIES = 0
    admin = get_user_model().objects.create_superuser("admin", password="admin-pw-1")
    quotas_demo.seed_people(PASSWORDS)
    node = NodeFactory(state=NodeState.ONLINE, labels={"demo": "true"})
    cards = [GPUFactory(node=node, model=MODELS[0], memory_total_mib=81920) for _ in range(2)]
    pool = PoolFactory(cards=cards)
    assert quotas_demo.seed_story(admin, pool, MODELS, now=NOW)
    assert timezone.now() > NOW + timedelta(days=1)
    reasons = {r.reason: r.state for r in GpuRequest.objects.all()}
    # No H100, L40S or T4 here, nor three A100s for the segmentation run: the other A100
    # asks are told.
    assert "Throughput benchmark of the new acoustic model." not in reasons
    assert "Evaluate last night's checkpoint." not in reasons
    assert reasons["Train the detector on the new street-scene set."] == RequestState.ALLOCATED
    assert reasons["Full training run of the detector."] == RequestState.PENDING


def test_the_clock_is_the_real_one_again_when_the_story_fails(transactional_db):
    nobody = get_user_model().objects.create_user("nobody")  # may not create tenants
    pool = PoolFactory()
    with pytest.raises(PermissionError):
        quotas_demo.seed_story(nobody, pool, MODELS, now=NOW)
    assert timezone.now() > NOW + timedelta(days=1)
    assert not Tenant.objects.exists()


def test_the_people_get_their_passwords_back(db):
    quotas_demo.seed_people(PASSWORDS)
    mei = get_user_model().objects.get(username="mei")
    mei.set_password("changed")
    mei.save()
    quotas_demo.seed_people(PASSWORDS)
    mei.refresh_from_db()
    assert mei.check_password("mei-pw-1") and not mei.is_staff


def test_the_pools_reclaim_policy_and_prices_are_set_once_and_audited(db):
    admin = get_user_model().objects.create_superuser("admin", password="admin-pw-1")
    pool = PoolFactory()
    reports_demo.seed(admin, pool)
    reports_demo.seed(admin, pool)
    policy = ReclaimPolicy.objects.get(pool=pool)
    assert (policy.idle_window_minutes, policy.reclaim) == (60, True)
    assert UnitPrice.objects.get(pool=pool).per_gpu_hour > 0
    actions = list(AuditEntry.objects.values_list("action", "actor_name"))
    assert sorted(actions) == [("reclaim_policy.create", "admin"), ("unit_price.create", "admin")]


def test_held_slices_are_the_allocations_as_their_agents_held_them(db):
    cards = [GPUFactory(node=NodeFactory(name=name, state=NodeState.ONLINE))
             for name in ("demo-01", "elsewhere")]  # fmt: skip
    pool = PoolFactory(cards=cards)
    holder = get_user_model().objects.create_user("ana")
    kept = place_lease(pool, Ask(compute_pct=30, memory_mib=1024, node="demo-01"),
                       holder=holder, unix_user="ana")  # fmt: skip
    gone = place_lease(pool, Ask(compute_pct=20, memory_mib=512, node="demo-01"),
                       holder=holder, unix_user="ana")  # fmt: skip
    place_lease(pool, Ask(compute_pct=20, memory_mib=512, node="elsewhere"), holder=holder,
                unix_user="ana")  # fmt: skip
    release_lease(gone.pk)
    since = timezone.now() - timedelta(hours=1)
    held = {h.slice.allocation_id: h for h in pools_demo.held_slices(["demo-01"], since)}
    [k] = kept.allocations.all()
    [g] = gone.allocations.all()
    assert set(held) == {f"alloc-{k.pk}", f"alloc-{g.pk}"}
    assert held[f"alloc-{k.pk}"].slice == Slice(f"alloc-{k.pk}", cards[0].uuid, 30, 1024, "ana")
    assert held[f"alloc-{k.pk}"].held_at(timezone.now())
    assert not held[f"alloc-{g.pk}"].held_at(timezone.now())
    assert pools_demo.held_slices(["demo-01"], timezone.now() + timedelta(minutes=1)) == [
        held[f"alloc-{k.pk}"]
    ]


ARGV = ["--backend", "sim", "--nodes", "2", "--gpus", "2", "--hostname", "demo",
        "--model", MODELS[2]]  # fmt: skip


def test_the_history_is_filled_where_the_rollups_have_none(db):
    end = timezone.now().replace(second=0, microsecond=0)
    start = end - timedelta(minutes=30)
    first = next(portal_views(ARGV, start.timestamp(), start.timestamp() + 1, lambda t: {}))[1]
    gpus = {}
    for host, view in first.items():
        node = NodeFactory(name=host)
        for card in view["gpus"]:
            gpus[card["uuid"]] = GPUFactory(node=node, uuid=card["uuid"], model=MODELS[2])
    uuid = first["demo-02"]["gpus"][0]["uuid"]
    # Minutes 10 and 11 were read live already; the others are filled.
    for minute in (10, 11):
        GpuMinute.objects.create(gpu=gpus[uuid], bucket=start + timedelta(minutes=minute),
                                 samples=12, util_avg=1, util_max=1)  # fmt: skip
    missing = telemetry_demo.missing_minutes(["demo-01", "demo-02"], start, end)
    assert len(missing) == 28 and start + timedelta(minutes=10) not in missing

    held = {"demo-02": [Slice("alloc-1", uuid, 50, 8192, "ana")]}
    wanted = {m.timestamp() + s for m in missing for s in range(0, 60, 10)}
    readings = (
        (datetime.fromtimestamp(t, UTC), views)
        for t, views in portal_views(ARGV, start.timestamp(), end.timestamp(),
                                     lambda t: held, step_s=10, wanted=wanted)
    )  # fmt: skip
    assert telemetry_demo.backfill(readings) == 28 * 4
    assert telemetry_demo.missing_minutes(["demo-01", "demo-02"], start, end) == []
    filled = GpuMinute.objects.exclude(bucket__in=[start + timedelta(minutes=m) for m in (10, 11)])
    assert set(filled.values_list("samples", flat=True)) == {6}
    assert GpuMinute.objects.get(gpu=gpus[uuid], bucket=start + timedelta(minutes=10)).samples == 12
    # The slice's owner ran on its card, nobody else anywhere; the hours are written too.
    assert set(OwnerMinute.objects.values_list("owner", "gpu__uuid").distinct()) == {("ana", uuid)}
    assert OwnerMinute.objects.count() == 28
    assert GpuHour.objects.filter(gpu=gpus[uuid]).exists()
