"""A developer's home in the browser: log in, land on it, see one's vGPU and request,
watch the vGPU's use change with a poll cycle and a new request's vGPU join, without a
reload, click through to its
launch settings; on a phone (390 x 844) nothing runs off the side. daphne serves the
portal on the test database; the poll cycles are recorded here, and their push reaches
the page over /ws/home/. Screenshots: test-artifacts/home-1440.png, home-390.png."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, expect

from quotas.requests.services import create_request
from tests import clients, procs
from tests.factories import gpu_team, held_allocation
from tests.test_browser import off_this_thread
from tests.test_home import poll, slice_report

pytestmark = [pytest.mark.browser]
ARTIFACTS = procs.REPO / "test-artifacts"


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[dict]:
    # Its policy approves a small ask at once: placed in the create's own transaction.
    team = gpu_team("vision", auto_approve_vgpus=1, auto_approve_compute_pct=50,
                    auto_approve_hours=8)  # fmt: skip
    card = team.cards[0]
    mine = held_allocation(team.tenant, team.pool, team.dev, timezone.now() - timedelta(hours=1),
                           compute_pct=30, memory_mib=8192, gpu=card)  # fmt: skip
    poll(card, util=12, report=[slice_report(mine, 1024)])
    # A worker for the deliveries queue: a request step's pushes go out from its notice task.
    with (procs.celery_worker(child_env_for_test_db, "notices", "-Q", "deliveries"),
          procs.daphne(child_env_for_test_db) as (url, _)):  # fmt: skip
        yield {"url": url, "team": team, "card": card, "vgpu": mine}


def test_a_developer_lands_on_home_sees_use_change_live_and_opens_the_launch_settings(
    site, browser: Browser
):
    url, team, vgpu = site["url"], site["team"], site["vgpu"]
    request_id = vgpu.lease.gpu_request.pk
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    try:
        # Signed in at the portal's root, the developer lands on their home.
        page.goto(f"{url}/")
        clients.sign_in(page, team.dev.username, lands_on=r"/home/$")
        row = page.locator(f'.vgpu[data-vgpu-id="{vgpu.pk}"]')
        expect(row).to_be_visible()
        expect(page.locator(f'.home-request[data-request-id="{request_id}"]')).to_have_attribute(
            "data-state", "allocated"
        )
        expect(page.locator("#quota-left .quota-left")).to_have_count(1)
        expect(row.locator("[data-field=card_util_pct]")).to_have_text("12")
        expect(row.locator("[data-field=memory_used_gib]")).to_have_text("1.0")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=10_000)
        page.evaluate("() => { window.__notReloaded = true; }")

        # A poll cycle: the card busier, the slice's processes holding more.
        off_this_thread(
            lambda: poll(site["card"], util=77, report=[slice_report(vgpu, 6144, processes=3)])
        )
        expect(row.locator("[data-field=card_util_pct]")).to_have_text("77", timeout=15_000)
        expect(row.locator("[data-field=memory_used_gib]")).to_have_text("6.0")
        expect(row.locator("[data-field=process_count]")).to_have_text("3")
        assert row.locator("[data-field=memory_meter]").evaluate("m => m.value") == 6144
        assert page.evaluate("() => window.__notReloaded === true"), "the page reloaded"

        # A new request, placed at once: its vGPU and its row join the page, unreloaded.
        off_this_thread(lambda: create_request(team.dev, **team.ask(reason="a second one")))
        expect(page.locator(".vgpu")).to_have_count(2, timeout=15_000)
        expect(page.locator(".home-request")).to_have_count(2)
        expect(page.locator(".home-request").first).to_have_attribute("data-state", "allocated")
        assert page.evaluate("() => window.__notReloaded === true"), "the page reloaded"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "home-1440.png"), full_page=True)

        # On a phone: nothing wider than the screen.
        page.set_viewport_size({"width": 390, "height": 844})
        expect(row).to_be_visible()
        wide = page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert wide[0] <= wide[1], f"the page is {wide[0]} px wide on a {wide[1]} px screen"
        page.screenshot(path=str(ARTIFACTS / "home-390.png"), full_page=True)

        # One click to the launch settings.
        row.locator(".launch-link").click()
        expect(page).to_have_url(re.compile(rf"/allocations/{vgpu.pk}/$"))
        expect(page.locator("#export-block")).to_contain_text("export GPU_PORTAL_ALLOCATION=")
        assert errors == [], errors
    finally:
        context.close()
