"""The request pages: the form's field errors with nothing changed, who sees and does what,
and one tenant's requests never shown to another's members."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from pools.models import PoolCard
from quotas.choices import RequestState
from quotas.models import GpuRequest, Notice, Quota
from quotas.requests.services import create_request, decide
from tests import clients
from tests.factories import MembershipFactory, PoolFactory, gpu_team, online_cards

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    return gpu_team("vision")


def form_data(team, **changes) -> dict:
    data = {
        "tenant": team.tenant.pk, "pool": team.pool.pk, "count": 1, "size": "slice",
        "compute_pct": 25, "memory_mib": 8, "duration_hours": 4, "reason": "training",
    }  # fmt: skip  # memory typed in GiB, as the pages show it
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_a_member_asks_for_a_slice_through_the_form(team):
    response = clients.page(team.dev).post("/requests/new/", form_data(team))
    assert response.status_code == 302
    req = GpuRequest.objects.get()
    assert (req.requester, req.compute_pct, req.state) == (team.dev, 25, RequestState.PENDING)
    assert req.memory_mib == 8192  # typed as 8 GiB, kept in MiB


def test_the_form_takes_memory_in_gib_with_decimals_and_keeps_mib(team):
    page = clients.page(team.dev).get("/requests/new/").content.decode()
    assert re.search(r'name="memory_mib"[^>]*value="8"', page), "8192 MiB shown as 8 GiB"
    assert "Memory per vGPU (GiB)" in page and "(7.5 GiB = 7680 MiB)" in page
    response = clients.page(team.dev).post("/requests/new/", form_data(team, memory_mib="7.5"))
    assert response.status_code == 302
    assert GpuRequest.objects.get().memory_mib == 7680


@pytest.mark.parametrize("slice_fields", [{}, {"compute_pct": None, "memory_mib": None}])
def test_a_whole_card_asked_through_the_form_is_sized_as_all_of_the_card(team, slice_fields):
    data = form_data(team, size="whole", **slice_fields)
    assert clients.page(team.dev).post("/requests/new/", data).status_code == 302
    req = GpuRequest.objects.get()
    assert (req.whole_card, req.compute_pct, req.memory_mib) == (True, 100, 0)


def test_the_size_is_offered_as_radio_checks_not_text_boxes(team):
    page = clients.page(team.dev).get("/requests/new/").content.decode()
    radios = re.findall(r"<input[^>]*type=\"radio\"[^>]*>", page)
    assert len(radios) == 2 and all('class="form-check-input"' in r for r in radios), radios
    assert 'role="radiogroup"' in page and 'id="id_size-label"' in page


def test_the_form_offers_only_the_users_tenants_and_their_pools(team):
    other = gpu_team("speech")
    page = clients.page(team.dev).get("/requests/new/").content.decode()
    assert "vision" in page and "speech" not in page
    # As the pool select's options: the compute field's initial 50 is a value="50" too.
    options = re.findall(r'<option value="(\d+)"', page)
    assert str(team.pool.pk) in options and str(other.pool.pk) not in options


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"count": 0}, "count"),
        ({"count": -1}, "count"),
        ({"compute_pct": 0}, "compute_pct"),
        ({"compute_pct": 101}, "compute_pct"),
        ({"memory_mib": 0}, "memory_mib"),
        ({"memory_mib": -5}, "memory_mib"),
        ({"memory_mib": 90}, "memory_mib"),  # GiB: larger than any card of the pool
        ({"memory_mib": "0.001"}, "memory_mib"),  # no whole number of MiB
        ({"memory_mib": "lots"}, "memory_mib"),
        ({"count": 3, "compute_pct": 100}, "count"),  # more cards than the pool has
        ({"pool": 999_999}, "pool"),  # unknown pool
        ({"duration_hours": 0}, "duration_hours"),
        ({"reason": ""}, "reason"),
        ({"reason": "x" * 2001}, "reason"),
        ({"node_labels": "no pairs here"}, "node_labels"),
        ({"compute_pct": "lots"}, "compute_pct"),
    ],
)
def test_bad_input_is_a_field_error_and_changes_nothing(team, changes, field):
    response = clients.page(team.dev).post("/requests/new/", form_data(team, **changes))
    assert response.status_code == 400
    assert response.context["form"].errors[field], response.context["form"].errors
    assert GpuRequest.objects.count() == 0


def test_over_quota_is_a_field_error_and_changes_nothing():
    team = gpu_team(guaranteed_vgpus=1, limit_vgpus=1)
    data = form_data(team, count=2, compute_pct=10)
    response = clients.page(team.dev).post("/requests/new/", data)
    assert response.status_code == 400
    assert "quota" in " ".join(response.context["form"].errors["count"])
    assert GpuRequest.objects.count() == 0


def test_a_pool_not_open_to_the_chosen_tenant_is_a_field_error(team):
    other = gpu_team("speech")
    MembershipFactory(user=team.dev, tenant=other.tenant)
    closed = PoolFactory(cards=online_cards(1))
    from tests.factories import QuotaFactory

    QuotaFactory(tenant=other.tenant, pool=closed)  # offered to dev through speech only
    response = clients.page(team.dev).post("/requests/new/", form_data(team, pool=closed.pk))
    assert response.status_code == 400
    assert response.context["form"].errors["pool"]
    assert GpuRequest.objects.count() == 0


def test_a_tenant_the_user_is_not_a_member_of_is_a_field_error(team):
    other = gpu_team("speech")
    response = clients.page(team.dev).post(
        "/requests/new/", form_data(team, tenant=other.tenant.pk)
    )
    assert response.status_code == 400
    assert response.context["form"].errors["tenant"]
    assert GpuRequest.objects.count() == 0


def test_my_page_lists_my_requests_with_state_queue_and_allocations(
    team, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        req = create_request(team.dev, **team.ask())
        decide(req.pk, team.approver, approve=True)
    page = clients.page(team.dev).get("/requests/").content.decode()
    assert f'data-request-id="{req.pk}" data-state="allocated"' in page
    lease_allocation = req.__class__.objects.get(pk=req.pk).lease.allocations.get()
    assert reverse("pools:allocation_detail", args=[lease_allocation.pk]) in page
    assert Notice.objects.filter(recipient=team.dev, read_at=None).count() == 2
    assert 'id="notice-badge" title="Unread notices">2<' in page


def test_pages_answer_anonymous_visitors_with_the_login_page(team):
    for path in ("/requests/", "/requests/new/", "/approvals/", "/requests/1/"):
        response = clients.page().get(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_another_tenants_request_is_not_found_for_a_member(team):
    req = create_request(team.dev, **team.ask())
    other = gpu_team("speech")
    for user in (other.dev, other.approver, other.admin):
        client = clients.page(user)
        assert client.get(f"/requests/{req.pk}/").status_code == 404
        assert (
            client.post(f"/requests/{req.pk}/decide/", {"decision": "approve"}).status_code == 404
        )
        assert client.post(f"/requests/{req.pk}/release/").status_code == 404
        assert client.get(f"/requests/{req.pk}/?part=1").status_code == 404
    part = clients.page(other.approver).get("/approvals/?part=1").content.decode()
    assert f'data-request-id="{req.pk}"' not in part
    req.refresh_from_db()
    assert req.state == RequestState.PENDING


def test_the_detail_pages_live_part_is_the_request_alone_for_the_socket_to_swap_in(team):
    req = create_request(team.dev, **team.ask())
    client = clients.page(team.dev)
    page = client.get(f"/requests/{req.pk}/").content.decode()
    assert f'data-part-url="/requests/{req.pk}/?part=1" data-request="{req.pk}"' in page
    assert 'id="live-status"' in page and "js/requests-live.js" in page
    part = client.get(f"/requests/{req.pk}/?part=1").content.decode()
    assert 'id="request" data-state="pending"' in part
    assert "<html" not in part and 'id="live-part"' not in part


def test_a_tenant_member_sees_a_teammates_request_but_may_not_act_on_it(team):
    req = create_request(team.admin, **team.ask())
    client = clients.page(team.dev)
    assert client.get(f"/requests/{req.pk}/").status_code == 200
    assert client.post(f"/requests/{req.pk}/decide/", {"decision": "approve"}).status_code == 403
    assert client.post(f"/requests/{req.pk}/release/").status_code == 403
    req.refresh_from_db()
    assert req.state == RequestState.PENDING


def test_the_approvals_queue_shows_pending_requests_of_the_approvers_tenants_only(team):
    mine = create_request(team.dev, **team.ask())
    own = create_request(team.approver, **team.ask())
    other = gpu_team("speech")
    theirs = create_request(other.dev, **other.ask())
    page = clients.page(team.approver).get("/approvals/").content.decode()
    assert f'data-request-id="{mine.pk}"' in page
    assert f'data-request-id="{own.pk}"' not in page  # nobody approves their own
    assert f'data-request-id="{theirs.pk}"' not in page
    assert clients.page(team.dev).get("/approvals/").status_code == 403


def test_a_platform_admin_sees_every_tenants_queue(team, alice):
    other = gpu_team("speech")
    theirs = create_request(other.dev, **other.ask())
    mine = create_request(team.dev, **team.ask())
    page = clients.page(alice).get("/approvals/").content.decode()
    assert f'data-request-id="{theirs.pk}"' in page and f'data-request-id="{mine.pk}"' in page


def test_an_approver_approves_with_a_comment_from_the_queue(
    team, django_capture_on_commit_callbacks
):
    req = create_request(team.dev, **team.ask())
    with django_capture_on_commit_callbacks(execute=True):
        response = clients.page(team.approver).post(
            f"/requests/{req.pk}/decide/",
            {"decision": "approve", "comment": "ok", "next": "approvals"},
            REMOTE_ADDR="10.1.2.3",
        )
    assert response.status_code == 302 and response["Location"] == "/approvals/"
    req.refresh_from_db()
    assert (req.state, req.decision_comment) == (RequestState.ALLOCATED, "ok")
    detail = clients.page(team.dev).get(f"/requests/{req.pk}/").content.decode()
    assert 'data-action="request.approve"' in detail and 'data-action="request.place"' in detail


def test_releasing_from_my_page_returns_the_capacity(team, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        req = create_request(team.dev, **team.ask())
        decide(req.pk, team.approver, approve=True)
        response = clients.page(team.dev).post(f"/requests/{req.pk}/release/")
    assert response.status_code == 302
    assert PoolCard.objects.filter(slices__gt=0).count() == 0


def test_a_resize_without_room_shows_the_error_on_the_field(django_capture_on_commit_callbacks):
    team = gpu_team(cards=1)
    with django_capture_on_commit_callbacks(execute=True):
        req = create_request(team.dev, **team.ask())
        decide(req.pk, team.approver, approve=True)
        other = create_request(team.admin, **team.ask(compute_pct=70))
        decide(other.pk, team.approver, approve=True)
    response = clients.page(team.dev).post(
        f"/requests/{req.pk}/resize/", {"compute_pct": 50, "memory_mib": 8}
    )
    assert response.status_code == 400
    assert "no room" in " ".join(response.context["resize_form"].errors["compute_pct"])
    req.refresh_from_db()
    assert req.compute_pct == 25


def test_the_sidebar_links_requests_for_everyone_and_approvals_for_approvers(team):
    assert 'href="/approvals/"' not in clients.page(team.dev).get("/requests/").content.decode()
    assert 'href="/approvals/"' in clients.page(team.approver).get("/requests/").content.decode()
    assert 'href="/requests/"' in clients.page(team.dev).get("/requests/").content.decode()


def test_the_approver_sees_the_tenants_quota_before_and_after_approving(team):
    # 2 vGPUs of 25 % and 8 GiB each, asked of a quota of 4 vGPUs, 1 card, 64 GiB.
    Quota.objects.filter(pk=team.quota.pk).update(
        guaranteed_vgpus=0,
        limit_vgpus=4,
        guaranteed_compute_pct=0,
        limit_compute_pct=100,
        guaranteed_memory_mib=0,
        limit_memory_mib=65536,
    )
    req = create_request(team.dev, **team.ask(count=2, compute_pct=25, memory_mib=8192))
    page = clients.page(team.approver).get("/approvals/").content.decode()
    row = page[page.index(f'data-request-id="{req.pk}"') :].split("</tr>")[0]
    assert "Tenant&#x27;s quota here" in page or "Tenant's quota here" in page
    assert re.search(r'data-dimension="vgpus".*?0 → 2 / 4', row, re.S), row
    assert re.search(r'data-dimension="compute_pct".*?0 → 0.5 / 1 GPUs', row, re.S), row
    assert re.search(r'data-dimension="memory_mib".*?0.0 → 16.0 / 64.0 GiB', row, re.S), row
    assert 'data-over="true"' not in row
    Quota.objects.filter(pk=team.quota.pk).update(limit_vgpus=1)
    row = clients.page(team.approver).get("/approvals/").content.decode()
    assert 'data-dimension="vgpus" data-over="true"' in row and "over the limit" in row
