"""The forms as a new user meets them (#22), in Chromium: a slug follows a name typed in
Chinese and ASCII (and stays empty for a name with no ASCII letter), memory is typed in
GiB and its hint says the MiB it means, and the request's page then shows its vGPU's
launch settings and asks before Release."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from playwright.sync_api import Browser, expect

from quotas.models import GpuRequest
from quotas.requests.services import decide
from tests import clients, procs
from tests.factories import UserFactory, gpu_team

pytestmark = [pytest.mark.browser]
ARTIFACTS = procs.REPO / "test-artifacts"


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, dict]]:
    team = gpu_team("forms")
    admin = UserFactory(username="forms-admin", is_superuser=True, is_staff=True)
    names = {"team": team, "admin": admin.username, "dev": team.dev.username}
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url, names


def _page(browser: Browser, url: str, user: str, path: str):
    context = browser.new_context()
    page = context.new_page()
    clients.sign_in(
        page, user, at=f"{url}/accounts/login/?next={path}", lands_on=re.escape(path) + "$"
    )
    return context, page


def test_slugs_follow_the_name_until_edited_in_chinese_and_ascii(site, browser):
    url, names = site
    context, page = _page(browser, url, names["admin"], "/pools/add/")
    try:
        page.locator("#id_name").press_sequentially("训练池 A100 Pool")
        expect(page.locator("#id_slug")).to_have_value("a100-pool")
        page.fill("#id_name", "")
        page.locator("#id_name").press_sequentially("训练池")  # no ASCII letter: left empty
        expect(page.locator("#id_slug")).to_have_value("")
        page.locator("#id_slug").press_sequentially("train")  # typed by hand: kept
        page.locator("#id_name").press_sequentially(" Big")
        expect(page.locator("#id_slug")).to_have_value("train")

        page.goto(f"{url}/tenants/add/")
        page.locator("#id_name").press_sequentially("视觉组 Vision Team")
        expect(page.locator("#id_slug")).to_have_value("vision-team")

        # The quota form: four groups, two side by side on a wide screen.
        page.set_viewport_size({"width": 1440, "height": 900})
        page.goto(f"{url}/tenants/forms/quotas/{names['team'].quota.pk}/edit/")
        sets = page.locator("fieldset.quota-fieldset")
        expect(sets).to_have_count(4)
        first, second = sets.nth(0).bounding_box(), sets.nth(1).bounding_box()
        assert abs(first["y"] - second["y"]) < 2 and second["x"] > first["x"] + 100
        expect(page.get_by_label("Memory limit (GiB)")).to_have_value(re.compile(r"^\d+(\.\d+)?$"))
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "quota-form-wide.png"), full_page=True)
    finally:
        context.close()


def test_memory_is_typed_in_gib_and_the_request_page_shows_launch_settings(site, browser):
    url, names = site
    team = names["team"]
    context, page = _page(browser, url, names["dev"], "/requests/new/")
    try:
        page.select_option("#id_tenant", str(team.tenant.pk))
        page.select_option("#id_pool", str(team.pool.pk))
        page.fill("#id_compute_pct", "25")
        page.fill("#id_memory_mib", "7.5")
        expect(page.locator(".gib-mib")).to_have_text("7.5 GiB = 7680 MiB")
        page.fill("#id_duration_hours", "4")
        page.fill("#id_reason", "GiB please")
        page.click("#request-form button[type=submit]")
        expect(page).to_have_url(re.compile(r"/requests/$"))

        with ThreadPoolExecutor(1) as thread:  # the ORM stays off Playwright's event loop

            def approve() -> tuple[int, int, str]:
                req = GpuRequest.objects.get(reason="GiB please")
                decide(req.pk, team.approver, approve=True)
                req.refresh_from_db()
                connection.close()  # this thread's own, or the test database stays in use
                return req.pk, req.memory_mib, req.state

            request_id, memory_mib, state = thread.submit(approve).result()
        assert (memory_mib, state) == (7680, "allocated")

        page.goto(f"{url}/requests/{request_id}/")
        panel = page.locator(".how-to-use")
        expect(panel).to_have_count(1)
        expect(panel.locator("pre.launch-env")).to_contain_text("export GPU_PORTAL_ALLOCATION=")
        expect(panel.locator("pre.launch-env")).to_contain_text("CUDA_DEVICE_MEMORY_LIMIT")
        expect(page.locator("#request")).to_contain_text("7.5 GiB")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "request-detail-launch.png"), full_page=True)

        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.get_by_role("button", name="Release").click()
        page.wait_for_timeout(500)  # a submitted form would have left the page by now
        page.reload()
        expect(page.locator("#request")).to_have_attribute("data-state", "allocated")
        assert asked and asked[0].startswith(f"Release the GPUs of request #{request_id}?")
    finally:
        context.close()
