"""DONE-WHEN for GPU requests: a developer asks for a GPU in the browser, an approver
approves it in another browser session, and the developer's page shows it placed
without reloading (daphne serving the portal on the test database, pushes over the
requests socket)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from quotas.requests.services import create_request
from tests import clients, procs
from tests.factories import gpu_team

pytestmark = [pytest.mark.browser]
ARTIFACTS = procs.REPO / "test-artifacts"


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, dict]]:
    """The portal served by daphne, a team (``names["team"]``) and its names."""
    team = gpu_team("vision")
    names = {
        "tenant": str(team.tenant.pk), "pool": str(team.pool.pk),
        "dev": team.dev.username, "approver": team.approver.username,
    }  # fmt: skip
    names["team"] = team
    # A worker for the deliveries queue: a request step's pushes go out from its notice task.
    with (procs.celery_worker(child_env_for_test_db, "notices", "-Q", "deliveries"),
          procs.daphne(child_env_for_test_db) as (url, _)):  # fmt: skip
        yield url, names


def logged_in(browser: Browser, url: str, user: str, path: str) -> tuple[BrowserContext, Page]:
    context = browser.new_context()
    page = context.new_page()
    clients.sign_in(
        page, user, at=f"{url}/accounts/login/?next={path}", lands_on=re.escape(path) + "$"
    )
    return context, page


def test_a_developer_sees_the_gpu_placed_live_after_an_approver_approves(site, browser):
    url, names = site
    dev_context, dev = logged_in(browser, url, names["dev"], "/requests/new/")
    approver_context, approver = logged_in(browser, url, names["approver"], "/approvals/")
    try:
        dev.select_option("#id_tenant", names["tenant"])
        dev.select_option("#id_pool", names["pool"])
        dev.fill("#id_count", "1")
        dev.fill("#id_compute_pct", "30")
        dev.fill("#id_memory_mib", "8")  # GiB
        dev.fill("#id_duration_hours", "4")
        dev.fill("#id_reason", "fine-tune the detector")
        dev.click("#request-form button[type=submit]")
        expect(dev).to_have_url(re.compile(r"/requests/$"))
        row = dev.locator(".request-row").first
        expect(row).to_have_attribute("data-state", "pending")
        expect(dev.locator("#live-status")).to_have_attribute("data-state", "live", timeout=10_000)
        dev.evaluate("() => { window.__notReloaded = true; }")

        # The approver's queue shows the new request; pushed, or there at load.
        queued = approver.locator(".approval-row")
        expect(queued).to_have_count(1, timeout=10_000)
        queued.first.locator("input[name=comment]").fill("go ahead")
        queued.first.locator(".approve-button").click()
        expect(approver.locator(".approval-row")).to_have_count(0, timeout=10_000)

        expect(dev.locator(".request-row").first).to_have_attribute(
            "data-state", "allocated", timeout=15_000
        )
        assert dev.evaluate("() => window.__notReloaded === true"), "the page reloaded"
        expect(dev.locator(".allocation-link").first).to_be_visible()
        expect(dev.locator(".notice").first).to_be_visible()
        expect(dev.locator("#notice-badge")).to_have_text("2")  # approved, placed
        ARTIFACTS.mkdir(exist_ok=True)
        dev.screenshot(path=str(ARTIFACTS / "requests-placed.png"), full_page=True)
    finally:
        dev_context.close()
        approver_context.close()


def test_the_size_choice_shows_which_option_is_chosen_and_clicks(site, browser):
    # The radios once drew as empty text boxes: nobody could see which size was chosen.
    url, names = site
    context, page = logged_in(browser, url, names["dev"], "/requests/new/")
    try:
        slice_radio = page.locator("input[name=size][value=slice]")
        whole_radio = page.locator("input[name=size][value=whole]")
        for radio in (slice_radio, whole_radio):
            expect(radio).to_be_visible()
            assert radio.evaluate("r => getComputedStyle(r).borderTopWidth") != "0px"
            box = radio.bounding_box()
            assert box is not None and 10 <= box["width"] <= 24, box
        expect(slice_radio).to_be_checked()
        page.get_by_text("Whole cards", exact=True).click()
        expect(whole_radio).to_be_checked()
        expect(slice_radio).not_to_be_checked()
        expect(page.locator("#id_compute_pct")).to_be_hidden()  # no slice size for a card
        look = (
            "r => { const s = getComputedStyle(r); return s.backgroundColor + s.backgroundImage; }"
        )
        checked_mark, unchecked_mark = whole_radio.evaluate(look), slice_radio.evaluate(look)
        assert checked_mark != unchecked_mark, "the chosen option looks like the other"
    finally:
        context.close()


def test_the_approvers_queue_shows_a_new_request_without_reloading(site, browser):
    url, names = site
    approver_context, approver = logged_in(browser, url, names["approver"], "/approvals/")
    dev_context, dev = logged_in(browser, url, names["dev"], "/requests/new/")
    try:
        expect(approver.locator("#live-status")).to_have_attribute(
            "data-state", "live", timeout=10_000
        )
        approver.evaluate("() => { window.__notReloaded = true; }")
        expect(approver.locator(".approval-row")).to_have_count(0)
        dev.select_option("#id_tenant", names["tenant"])
        dev.select_option("#id_pool", names["pool"])
        dev.fill("#id_reason", "a quick test")
        dev.click("#request-form button[type=submit]")
        expect(approver.locator(".approval-row")).to_have_count(1, timeout=10_000)
        assert approver.evaluate("() => window.__notReloaded === true")
        # Both buttons whole inside the table's card (they were clipped at its edge), and
        # the tenant's quota beside them.
        card = approver.locator("#approvals").locator("xpath=ancestor::div[@class='card']")
        edge = card.bounding_box()
        for button in (".approve-button", ".reject-button"):
            box = approver.locator(f".approval-row {button}").bounding_box()
            assert box is not None and edge is not None, button
            assert box["x"] + box["width"] <= edge["x"] + edge["width"] + 0.5, (button, box, edge)
        expect(approver.locator(".approval-row .quota-outlook dl")).to_be_visible()
    finally:
        dev_context.close()
        approver_context.close()


def test_the_request_page_shows_its_approval_and_placement_live(site, browser):
    url, names = site
    team = names["team"]
    # On a thread of its own: the session's Playwright loop makes this one async to Django.
    with ThreadPoolExecutor(1) as thread:
        ask = team.ask(reason="detail page")
        request_id = thread.submit(lambda: create_request(team.dev, **ask).pk).result()
    path = f"/requests/{request_id}/"
    dev_context, dev = logged_in(browser, url, names["dev"], path)
    approver_context, approver = logged_in(browser, url, names["approver"], "/approvals/")
    try:
        expect(dev.locator("#request")).to_have_attribute("data-state", "pending")
        expect(dev.locator("#live-status")).to_have_attribute("data-state", "live", timeout=10_000)
        dev.evaluate("() => { window.__notReloaded = true; }")
        row = approver.locator(f'.approval-row[data-request-id="{request_id}"]')
        expect(row).to_have_count(1, timeout=10_000)
        row.locator(".approve-button").click()
        expect(dev.locator("#request")).to_have_attribute("data-state", "allocated", timeout=15_000)
        assert dev.evaluate("() => window.__notReloaded === true"), "the page reloaded"
        expect(dev.locator("#request .allocation-link").first).to_be_visible()
        expect(dev.locator(".history-entry[data-action='request.place']")).to_have_count(1)
        ARTIFACTS.mkdir(exist_ok=True)
        dev.screenshot(path=str(ARTIFACTS / "request-detail-placed.png"), full_page=True)
    finally:
        dev_context.close()
        approver_context.close()


def test_cancelling_a_request_asks_first_and_a_no_changes_nothing(site, browser):
    url, names = site
    team = names["team"]
    with ThreadPoolExecutor(1) as thread:
        ask = team.ask(reason="to be cancelled")
        request_id = thread.submit(lambda: create_request(team.dev, **ask).pk).result()
    path = f"/requests/{request_id}/"
    context, page = logged_in(browser, url, names["dev"], path)
    asked: list[str] = []
    try:
        cancel = page.get_by_role("button", name="Cancel the request")
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        cancel.click()
        page.wait_for_timeout(500)  # a submitted form would have left the page by now
        page.reload()
        expect(page.locator("#request")).to_have_attribute("data-state", "pending")
        assert asked == [f"Cancel request #{request_id}?"], asked
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Cancel the request").click()
        expect(page.locator("#request")).to_have_attribute("data-state", "cancelled")
    finally:
        context.close()
