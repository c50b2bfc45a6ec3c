"""In a browser: the pool page's per-card map shows a slice placed after it loaded,
without a reload (daphne on the test database, the Redis channel layer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from pools.models import Pool
from tests import procs, test_browser
from tests.factories import PoolFactory, UserFactory, online_cards, placed_lease

pytestmark = [pytest.mark.browser, pytest.mark.stack]


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, Pool]]:
    pool = PoolFactory(name="live", slug="live", cards=online_cards(2))
    UserFactory(username="erin")
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url, pool


def test_the_card_map_shows_a_slice_placed_after_the_page_loaded(site, browser):
    url, pool = site
    page = browser.new_page()
    try:
        page.goto(f"{url}/pools/{pool.slug}/")
        page.fill("#id_username", "erin")
        page.fill("#id_password", "erin-pw-1")
        page.click("button[type=submit]")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=20_000)
        expect(page.locator(".pool-card")).to_have_count(2)
        assert page.locator(".slice").count() == 0
        page.evaluate("() => { window.__loaded = true; }")

        def place() -> None:
            holder = UserFactory(username="frank")
            placed_lease(pool, holder, compute_pct=40, memory_mib=8192, label="late")

        test_browser.off_this_thread(place)
        # erin may not see frank's lease: the slice shows, without its owner.
        expect(page.locator('[data-bar="compute"] .slice')).to_have_count(1, timeout=10_000)
        expect(page.locator('[data-total="compute_allocated_pct"]')).to_have_text("40")
        expect(page.locator(".slice-list li")).to_contain_text("another user")
        assert page.evaluate("() => window.__loaded === true"), "the page reloaded"
        test_browser.ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(test_browser.ARTIFACTS / "pool-map.png"), full_page=True)
    finally:
        page.close()
