"""The idle report in Chromium on the demo's slices (quotas.demo.SLICES): the idle ones
and the busy ones in their own tables, each with its sparkline, with no content-security-
policy violation; a screenshot is kept in test-artifacts/idle-report.png."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from pools.services import place_lease
from quotas.choices import RequestState
from quotas.demo import SLICES
from quotas.models import GpuRequest
from reports import scan
from telemetry.models import GpuMinute, OwnerMinute
from tests import clients, procs
from tests.factories import PoolFactory, TenantFactory, online_cards
from tests.test_browser import ARTIFACTS
from tests.test_browser_csp import RECORD_VIOLATIONS, _violations

pytestmark = [pytest.mark.browser, pytest.mark.stack]

BUSY = {"training", "benchmark"}  # running for the last three hours; the others idle


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[str]:
    get_user_model().objects.create_superuser("frank", password="frank-pw-1")
    developer = get_user_model().objects.create_user("developer")
    cards = online_cards(4)
    pool = PoolFactory(name="Demo", slug="demo", cards=cards)
    now = timezone.now().replace(second=0, microsecond=0)
    placed = {}
    for label, ask in SLICES:
        # A Unix user per slice, so each slice's processes are told apart on shared cards.
        lease = place_lease(pool, ask, holder=developer, unix_user=label, label=label)
        lease.allocations.update(placed_at=now - timedelta(hours=4))
        placed[label] = lease
    # The notebook is a tenant's (through its request), for the tenant filter.
    GpuRequest.objects.create(
        tenant=TenantFactory(name="Vision Lab", slug="vision-lab"), pool=pool,
        requester=developer, reason="notebook", lease=placed["notebook"],
        state=RequestState.ALLOCATED, placed_at=now - timedelta(hours=4),
    )  # fmt: skip
    minutes, owners = [], []
    busy_cards = {a.gpu_id for label in BUSY for a in placed[label].allocations.all()}
    for gpu in cards:
        for m in range(1, 181):
            at = now - timedelta(minutes=m)
            util = 70.0 if gpu.pk in busy_cards else 0.0
            minutes.append(GpuMinute(gpu=gpu, bucket=at, samples=12, util_avg=util + (m % 7),
                                     util_max=util, memory_used_avg_mib=0,
                                     memory_used_max_mib=0))  # fmt: skip
    for label in BUSY:
        for allocation in placed[label].allocations.all():
            owners += [OwnerMinute(gpu_id=allocation.gpu_id, owner=label, samples=12,
                                   bucket=now - timedelta(minutes=m), memory_used_avg_mib=20000,
                                   memory_used_max_mib=20000) for m in range(1, 181)]  # fmt: skip
    GpuMinute.objects.bulk_create(minutes)
    OwnerMinute.objects.bulk_create(owners)
    scan.scan(now)
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url


def test_the_idle_page_shows_idle_and_busy_allocations_apart(site, browser):
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.add_init_script(RECORD_VIOLATIONS)
    try:
        clients.sign_in(page, "frank", at=site + "/accounts/login/", lands_on=r"/$")
        page.click("text=Idle GPUs")  # the sidebar's link
        expect(page).to_have_url(re.compile(r"/idle/$"))
        idle = page.locator("#idle-allocations tr.idle-row")
        busy = page.locator("#busy-allocations tr.idle-row")
        # notebook and inference idle; training's two slices and benchmark busy.
        expect(idle).to_have_count(2)
        expect(busy).to_have_count(3)
        expect(idle.first.locator("svg.sparkline.is-idle polyline")).to_have_attribute(
            "points", re.compile(r"^0\.0,")
        )
        expect(page.locator("#idle-cards")).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "idle-report.png"), full_page=True)
        assert _violations(page) == []
        # The tenant filter names the tenants; choosing one leaves its notebook alone.
        tenant = page.locator("#id_tenant")
        expect(tenant.locator("option").first).to_have_text("All tenants")
        tenant.select_option(label="Vision Lab")
        page.click(".idle-filters button[type=submit]")
        expect(page).to_have_url(re.compile(r"[?&]tenant=\d+"))
        expect(idle).to_have_count(1)
        expect(busy).to_have_count(0)
        expect(page.locator("#id_tenant option:checked")).to_have_text("Vision Lab")
        assert _violations(page) == []
        page.goto(site + "/accounting/")
        expect(page.locator("#accounting-chart .uplot")).to_have_count(1)
        assert _violations(page) == []
    finally:
        page.close()
    assert errors == []
