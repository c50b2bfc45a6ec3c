"""What a new user meets in the forms and pages (#22): memory typed in GiB and kept in
MiB, the quota form in groups, the pool list's breadcrumb, the alerts tabs on the channels
page, slugs that follow the name, and a request's launch settings on its own page."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from portal.forms import GiBField, mib_as_gib
from quotas.models import Quota
from quotas.requests.forms import ResizeForm
from quotas.requests.services import create_request, decide
from quotas.tenancy.forms import QuotaForm, TenantAddForm
from quotas.tenancy.services import QUOTA_FIELDS
from tests import clients
from tests.factories import gpu_team, online_cards

# --- memory in GiB ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "mib"),
    [("80", 81920), ("7.5", 7680), ("0.5", 512), ("0.0009765625", 1), (" 16 ", 16384)],
)
def test_a_gib_field_takes_decimals_and_cleans_to_whole_mib(typed, mib):
    assert GiBField(min_mib=1).clean(typed) == mib


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("-1", "0 GiB or more"),
        ("0.001", "whole number of MiB"),  # 1.024 MiB
        ("0.00000000001", "10 decimal places"),
        ("lots", "Enter a number"),
        ("1e400", "20 digits"),
    ],
)
def test_a_gib_field_refuses_what_is_no_whole_mib_size(typed, says):
    with pytest.raises(ValidationError) as refused:
        GiBField().clean(typed)
    assert says in " ".join(refused.value.messages)


def test_a_gib_field_keeps_its_bounds_in_mib():
    field = GiBField(min_mib=1, max_mib=81920)
    with pytest.raises(ValidationError, match="above 0 GiB"):
        field.clean("0")
    with pytest.raises(ValidationError, match=r"at most 80 GiB \(81920 MiB\)"):
        field.clean("80.5")
    assert GiBField(required=False).clean("") is None


def test_mib_read_as_the_gib_one_types():
    assert [mib_as_gib(m) for m in (81920, 7680, 1, 0, 1024000)] == [
        "80", "7.5", "0.0009765625", "0", "1000"
    ]  # fmt: skip


def test_the_resize_form_shows_gib_and_cleans_to_mib():
    form = ResizeForm(initial={"compute_pct": 25, "memory_mib": 8192})
    assert re.search(r'name="memory_mib"[^>]*value="8"', str(form["memory_mib"]))
    bound = ResizeForm({"compute_pct": 25, "memory_mib": "12.25"})
    assert bound.is_valid() and bound.cleaned_data["memory_mib"] == 12544
    assert not ResizeForm({"compute_pct": 25, "memory_mib": "-2"}).is_valid()


@pytest.mark.django_db
def test_the_quota_form_takes_memory_in_gib_and_keeps_mib():
    team = gpu_team("gib")
    quota = team.quota
    initial = QuotaForm(quota=quota, tenant=team.tenant)
    assert initial["limit_memory_mib"].value() == mib_as_gib(quota.limit_memory_mib)
    assert initial.fields["limit_memory_mib"].label == "Memory limit (GiB)"
    data = {name: initial[name].value() for name in QUOTA_FIELDS}
    data |= {"guaranteed_memory_mib": "0.5", "limit_memory_mib": "160", "user_limit_memory_mib": ""}
    form = QuotaForm({k: "" if v is None else v for k, v in data.items()}, quota=quota,
                     tenant=team.tenant)  # fmt: skip
    assert form.is_valid(), form.errors
    assert form.cleaned_data["limit_memory_mib"] == 163840
    assert form.cleaned_data["guaranteed_memory_mib"] == 512
    assert form.cleaned_data["user_limit_memory_mib"] is None


@pytest.mark.django_db
def test_a_quota_saved_through_the_page_in_gib_is_mib_in_the_api(alice):
    team = gpu_team("gib")
    url = f"/tenants/gib/quotas/{team.quota.pk}/edit/"
    client = clients.page(alice)
    form = client.get(url).context["form"]
    data = {name: form[name].value() for name in QUOTA_FIELDS}
    data = {k: "" if v is None else v for k, v in data.items()} | {"limit_memory_mib": "1000.5"}
    saved = client.post(url, data)
    assert saved.status_code == 302, saved.context["form"].errors
    assert Quota.objects.get(pk=team.quota.pk).limit_memory_mib == 1024512
    answer = clients.api(alice).get(f"/api/v1/quotas/{team.quota.pk}/").json()
    assert answer["limit_memory_mib"] == 1024512
    before = Quota.objects.get(pk=team.quota.pk).limit_memory_mib
    refused = client.post(url, data | {"limit_memory_mib": "0.3"})
    assert refused.status_code == 200 and "limit_memory_mib" in refused.context["form"].errors
    assert Quota.objects.get(pk=team.quota.pk).limit_memory_mib == before


@pytest.mark.django_db
def test_the_gpu_page_shows_its_memory_in_gib(alice):
    card = online_cards(1)[0]
    page = clients.page(alice).get(reverse("telemetry:gpu", args=[card.pk])).content.decode()
    assert "80.0 GiB" in page and "81920 MiB" not in page


# --- the quota form in groups -------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_quota_starts_its_memory_at_the_models_default_in_gib():
    team = gpu_team("fresh")
    form = QuotaForm(tenant=team.tenant)
    assert form["guaranteed_memory_mib"].value() == "0"
    assert form["user_limit_memory_mib"].value() is None


def test_the_quota_form_groups_every_field_once():
    names = [name for _legend, group in QuotaForm.FIELDSETS for name in group]
    assert sorted(names) == sorted(QUOTA_FIELDS) and len(names) == len(set(names)) == 17


@pytest.mark.django_db
def test_the_quota_page_shows_its_groups_side_by_side_with_a_small_v(alice):
    team = gpu_team("groups")
    page = clients.page(alice).get(f"/tenants/groups/quotas/{team.quota.pk}/edit/")
    text = page.content.decode()
    legends = re.findall(r"<legend[^>]*>\s*([^<]+?)\s*</legend>", text)
    assert legends == ["Size", "GPU-hours", "Per member", "Approval"]
    assert text.count('class="col-12 col-lg-6"><fieldset') == 4
    assert "vGPUs per member" in text and "VGPU" not in text


# --- breadcrumbs, tabs, slugs -------------------------------------------------------------


@pytest.mark.django_db
def test_the_pool_list_has_the_breadcrumb_of_its_siblings(alice):
    text = clients.page(alice).get("/pools/").content.decode()
    crumbs = re.search(r'<ol class="breadcrumb".*?</ol>', text, re.S)
    assert crumbs, "no breadcrumb"
    assert 'href="/"' in crumbs.group() or "Fleet" in crumbs.group()
    assert 'aria-current="page">Pools<' in crumbs.group()


@pytest.mark.django_db
def test_the_channels_page_has_the_alerts_tabs_with_channels_active(bob):
    text = clients.page(bob).get("/alerts/channels/").content.decode()
    tabs = re.search(r'<ul class="nav nav-tabs.*?</ul>', text, re.S)
    assert tabs, "no tabs"
    for url in ("/alerts/events/", "/alerts/rules/", "/alerts/subscriptions/", "/alerts/channels/"):
        assert f'href="{url}"' in tabs.group(), url
    active = re.findall(r'class="nav-link active" href="([^"]+)"', tabs.group())
    assert active == ["/alerts/channels/"]


@pytest.mark.django_db
def test_the_create_forms_slug_follows_the_name():
    assert 'data-slug-from="name"' in str(TenantAddForm()["slug"])
    from pools.forms import PoolForm

    assert 'data-slug-from="name"' in str(PoolForm()["slug"])


# --- launch settings on the request's page ------------------------------------------------


@pytest.mark.django_db
def test_a_placed_requests_page_shows_the_launch_settings_of_its_vgpus(
    django_capture_on_commit_callbacks,
):
    team = gpu_team("launch")
    with django_capture_on_commit_callbacks(execute=True):
        req = create_request(team.dev, **team.ask(count=2, compute_pct=25, memory_mib=8192))
        decide(req.pk, team.approver, approve=True)
    req.refresh_from_db()
    allocations = list(req.lease.allocations.order_by("pk"))
    assert len(allocations) == 2
    client = clients.page(team.dev)
    for part in ("", "?part=1"):  # the page and the part its live script swaps in
        text = client.get(f"/requests/{req.pk}/{part}").content.decode()
        for a in allocations:
            assert f'id="export-block-{a.pk}"' in text
            assert f'data-copy="export-block-{a.pk}"' in text
            assert f"export GPU_PORTAL_ALLOCATION={a.agent_id}" in text
    page = client.get(f"/requests/{req.pk}/").content.decode()
    assert "js/pools-allocation.js" in page  # the copy buttons' script
    # Release asks first, as Drain does (static/portal/base.js's data-confirm).
    assert re.search(r'data-confirm="Release the GPUs of request #\d+\?[^"]*">Release<', page)


@pytest.mark.django_db
def test_a_pending_request_shows_no_launch_settings():
    team = gpu_team("pending")
    req = create_request(team.dev, **team.ask(compute_pct=25, memory_mib=8192))
    text = clients.page(team.dev).get(f"/requests/{req.pk}/").content.decode()
    assert "export-block" not in text and "how-to-use" not in text
    assert re.search(r'data-confirm="Cancel request #\d+\?">Cancel the request<', text)


@pytest.mark.django_db
def test_the_request_page_shows_launch_settings_to_who_may_open_the_vgpu(
    django_capture_on_commit_callbacks,
):
    team = gpu_team("others")
    with django_capture_on_commit_callbacks(execute=True):
        req = create_request(team.admin, **team.ask(compute_pct=25, memory_mib=8192))
        decide(req.pk, team.approver, approve=True)
    allocation = req.__class__.objects.get(pk=req.pk).lease.allocations.get()
    for user in (team.admin, team.approver, team.dev):
        client = clients.page(user)
        opens = client.get(f"/allocations/{allocation.pk}/").status_code == 200
        page = client.get(f"/requests/{req.pk}/")
        shown = page.status_code == 200 and "export-block" in page.content.decode()
        assert shown == opens, user
