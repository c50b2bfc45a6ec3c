"""In a browser: the pool page's per-card map shows a slice placed after it loaded,
without a reload (daphne on the test database, the Redis channel layer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from pools.choices import AllocationState
from pools.models import Allocation, Pool
from tests import clients, procs, test_browser
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
        clients.sign_in(page, "erin", at=f"{url}/pools/{pool.slug}/")
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
        # 40 % of one card, counted in cards as the page shows a pool's compute.
        expect(page.locator('[data-total="compute_allocated_pct"]')).to_have_text("0.4")
        expect(page.locator(".slice-list li")).to_contain_text("another user")
        assert page.evaluate("() => window.__loaded === true"), "the page reloaded"
        test_browser.ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(test_browser.ARTIFACTS / "pool-map.png"), full_page=True)
    finally:
        page.close()


@pytest.fixture
def busy_site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, Pool, int]]:
    """A pool over two nodes with one slice on the first, and erin, who may change pools."""
    first, second = online_cards(1), online_cards(1)
    pool = PoolFactory(name="ops", slug="ops", cards=[*first, *second])
    erin = UserFactory(username="erin")
    erin.user_permissions.add(Permission.objects.get(codename="change_pool"))
    lease = placed_lease(pool, UserFactory(username="frank"), compute_pct=30, memory_mib=8192)
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url, pool, lease.pk


def test_an_admin_clicks_drain_and_the_node_drains_and_its_vgpu_moves(busy_site, browser):
    url, pool, lease_id = busy_site

    def where() -> tuple[int, str, str]:
        allocation = Allocation.objects.select_related("gpu__node").get(lease_id=lease_id)
        return allocation.gpu.node_id, allocation.gpu.node.name, allocation.state

    node_id, node_name, _ = test_browser.off_this_thread(where)
    page = browser.new_page()
    try:
        clients.sign_in(page, "erin", at=f"{url}/pools/{pool.slug}/")
        row = page.locator(f'#manage-nodes tr[data-node-id="{node_id}"]')
        asked = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        row.get_by_role("button", name="Drain").click()
        expect(page.locator(".alert-success")).to_contain_text("1 vGPU(s) moved")
        row = page.locator(f'#manage-nodes tr[data-node-id="{node_id}"]')
        expect(row.locator('[data-field="node-state"]')).to_have_text("Draining")
        expect(row.get_by_role("button", name="Undrain")).to_be_visible()
        assert asked and node_name in asked[0]
        moved_to, _, state = test_browser.off_this_thread(where)
        assert moved_to != node_id and state == AllocationState.ACTIVE
    finally:
        page.close()
