"""GPU requests over the API: the same rules as the pages; bad input a 400 with field
errors and nothing changed; another tenant's requests are not there."""

from __future__ import annotations

import pytest
from django.urls import reverse

from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests.services import create_request
from tests import clients
from tests.api import error_fields
from tests.factories import gpu_team

pytestmark = pytest.mark.django_db
URL = "/api/v1/gpu-requests/"


@pytest.fixture
def team():
    return gpu_team("vision")


def body(team, **changes) -> dict:
    data = {"tenant": team.tenant.pk, "pool": team.pool.pk, "count": 1, "compute_pct": 25,
            "memory_mib": 8192, "duration_hours": 4, "reason": "ci job"}  # fmt: skip
    return {**data, **changes}


def test_a_ci_job_asks_is_approved_and_sees_its_allocation(
    team, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        created = clients.api(team.dev).post(URL, body(team), format="json")
    assert created.status_code == 201, created.data
    assert created.data["state"] == "pending"
    with django_capture_on_commit_callbacks(execute=True):
        approved = clients.api(team.approver).post(
            f"{URL}{created.data['id']}/approve/", {"comment": "ok"}, format="json"
        )
    assert approved.status_code == 200
    got = clients.api(team.dev).get(f"{URL}{created.data['id']}/").data
    assert got["state"] == "allocated" and len(got["allocations"]) == 1
    assert got["allocations"][0]["url"].endswith(
        reverse("pools:allocation_detail", args=[got["allocations"][0]["id"]])
    )
    with django_capture_on_commit_callbacks(execute=True):
        released = clients.api(team.dev).post(f"{URL}{created.data['id']}/release/")
    assert released.data["state"] == "released"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"count": 0}, "count"),
        ({"count": -2}, "count"),
        ({"count": "many"}, "count"),
        ({"compute_pct": 0}, "compute_pct"),
        ({"compute_pct": 150}, "compute_pct"),
        ({"memory_mib": 0}, "memory_mib"),
        ({"memory_mib": 90_000}, "memory_mib"),
        ({"count": 3, "compute_pct": 100}, "count"),
        ({"pool": 999_999}, "pool"),
        ({"tenant": 999_999}, "tenant"),
        ({"duration_hours": 0}, "duration_hours"),
        ({"reason": ""}, "reason"),
        ({"node_labels": {f"k{i}": "v" for i in range(20)}}, "node_labels"),
        ({"node_labels": ["a"]}, "node_labels"),
    ],
)
def test_bad_input_is_a_400_on_the_field_and_changes_nothing(team, changes, field):
    response = clients.api(team.dev).post(URL, body(team, **changes), format="json")
    assert response.status_code == 400
    assert field in error_fields(response), response.data
    assert GpuRequest.objects.count() == 0


def test_over_quota_not_a_member_and_pool_not_open_are_400s(team):
    other = gpu_team("speech")
    cases = [
        (body(team, count=2, compute_pct=100, memory_mib=1), "count", team.dev, {"limit_vgpus": 1}),
        (body(team, tenant=other.tenant.pk, pool=other.pool.pk), "tenant", team.dev, {}),
        (body(team, pool=other.pool.pk), "pool", team.dev, {}),
    ]
    for data, field, user, quota in cases:
        if quota:
            type(team.quota).objects.filter(pk=team.quota.pk).update(guaranteed_vgpus=1, **quota)
        response = clients.api(user).post(URL, data, format="json")
        assert response.status_code == 400 and field in error_fields(response), response.data
    assert GpuRequest.objects.count() == 0


def test_the_list_holds_only_the_callers_tenants_requests(team, alice):
    mine = create_request(team.dev, **team.ask())
    other = gpu_team("speech")
    theirs = create_request(other.dev, **other.ask())
    ids = {row["id"] for row in clients.api(other.admin).get(URL).data["results"]}
    assert ids == {theirs.pk}
    assert clients.api(other.admin).get(f"{URL}{mine.pk}/").status_code == 404
    assert {row["id"] for row in clients.api(alice).get(URL).data["results"]} == {
        mine.pk,
        theirs.pk,
    }


@pytest.mark.parametrize("action", ["approve", "reject", "release", "extend", "resize"])
def test_another_tenants_admin_gets_404_and_nothing_changes(team, action):
    req = create_request(team.dev, **team.ask())
    response = clients.api(gpu_team("speech").admin).post(
        f"{URL}{req.pk}/{action}/", {"hours": 1, "compute_pct": 10, "memory_mib": 10}
    )
    assert response.status_code == 404
    req.refresh_from_db()
    assert req.state == RequestState.PENDING


def test_a_member_may_not_approve_and_nobody_their_own(team):
    req = create_request(team.dev, **team.ask())
    assert clients.api(team.admin).post(f"{URL}{req.pk}/approve/").status_code == 200
    own = create_request(team.approver, **team.ask())
    assert clients.api(team.approver).post(f"{URL}{own.pk}/approve/").status_code == 403
    other = create_request(team.admin, **team.ask())
    assert clients.api(team.dev).post(f"{URL}{other.pk}/approve/").status_code == 403
    assert GpuRequest.objects.get(pk=own.pk).state == RequestState.PENDING


def test_anonymous_callers_are_refused(team):
    assert clients.api().get(URL).status_code in (401, 403)
    assert clients.api().post(URL, body(team), format="json").status_code in (401, 403)


def test_waiting_for_me_lists_what_i_may_decide(team):
    req = create_request(team.dev, **team.ask())
    create_request(team.approver, **team.ask())
    rows = clients.api(team.approver).get(URL, {"waiting_for_me": "true"}).data["results"]
    assert [row["id"] for row in rows] == [req.pk]


def test_a_decision_on_a_decided_request_is_a_400(team):
    req = create_request(team.dev, **team.ask())
    clients.api(team.approver).post(f"{URL}{req.pk}/reject/", {"comment": "no"}, format="json")
    response = clients.api(team.approver).post(f"{URL}{req.pk}/approve/")
    assert response.status_code == 400 and "state" in error_fields(response)


@pytest.mark.django_db
def test_extending_or_resizing_a_request_whose_quota_was_deleted_is_a_clear_400(alice):
    # Found by schemathesis' stateful phase: a quota deleted while its requests held
    # slices, then an extend or a resize of one was a 500 (Quota.DoesNotExist).
    team = gpu_team(auto_approve_vgpus=1, auto_approve_compute_pct=50, auto_approve_hours=8)
    req = create_request(team.dev, **team.ask())
    assert req.state == RequestState.ALLOCATED
    gone = clients.api(alice).delete(f"/api/v1/quotas/{team.quota.pk}/")
    assert gone.status_code == 204
    dev = clients.api(team.dev)
    extend = dev.post(f"{URL}{req.pk}/extend/", {"hours": 2}, format="json")
    resize = dev.post(f"{URL}{req.pk}/resize/", {"compute_pct": 20, "memory_mib": 4096},
                      format="json")  # fmt: skip
    assert extend.status_code == 400 and list(error_fields(extend)) == ["hours"], extend.json()
    assert resize.status_code == 400 and list(error_fields(resize)) == ["compute_pct"], (
        resize.json()
    )
    after = GpuRequest.objects.get(pk=req.pk)
    assert (after.duration_hours, after.compute_pct, after.memory_mib, after.extension_hours) == (
        req.duration_hours, req.compute_pct, req.memory_mib, None)  # fmt: skip
