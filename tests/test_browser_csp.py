"""Every page works under the content security policy: Chromium reports no violation.

A violation shows in the browser's console as an error ("Refused to ..."), and as a
``securitypolicyviolation`` event in the page; both are collected on every page a person
opens, from the login page to the API docs, with the live websocket connected.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Page, expect

from agents.models import GPU
from tests import procs
from tests.factories import NodeFactory, PoolFactory, online_cards, placed_lease
from tests.test_browser import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.stack]

# Runs in every document before its own scripts: keeps each violation the page reports.
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) =>
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`));
"""


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, int, int, int]]:
    """daphne alone on the test database: one node with one card, and an admin, frank,
    holding a slice of a pool's card."""
    node = NodeFactory(name="csp-01")
    gpu = GPU.objects.create(node=node, index=0, uuid="GPU-csp-0", model="NVIDIA A100")
    frank = get_user_model().objects.create_superuser("frank", password="frank-pw-1")
    pool = PoolFactory(slug="csp", cards=online_cards(1))
    lease = placed_lease(pool, frank, compute_pct=20, memory_mib=4096)
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url, node.pk, gpu.pk, lease.allocations.get().pk


# ReDoc's "API docs by Redocly" badge is an image on Redocly's CDN: the policy keeps the
# docs page off the internet, so that one image is refused on purpose.
EXPECTED = {"img-src https://cdn.redoc.ly/redoc/logo-mini.svg"}


def _violations(page: Page) -> list[str]:
    return [v for v in page.evaluate("() => window.__violations || []") if v not in EXPECTED]


def test_every_page_works_under_the_policy(site, browser):
    base, node_id, gpu_id, allocation_id = site
    page = browser.new_page()
    console: list[str] = []
    page.on("console", lambda m: m.type == "error" and console.append(f"{page.url}: {m.text}"))
    page.on("pageerror", lambda error: console.append(f"{page.url}: {error}"))
    page.add_init_script(RECORD_VIOLATIONS)
    seen: list[str] = []

    def visit(path: str, ready: str) -> None:
        page.goto(base + path)
        # Generous: ReDoc renders the whole schema, slow on a machine busy with other tests.
        expect(page.locator(ready).first).to_be_visible(timeout=60_000)
        seen.extend(f"{path}: {v}" for v in _violations(page))

    try:
        visit("/accounts/login/", "#id_username")
        page.fill("#id_username", "frank")
        page.fill("#id_password", "frank-pw-1")
        page.click("button[type=submit]")
        expect(page).to_have_url(re.compile(r"/$"))
        # The live pages: their websocket is allowed and connects.
        visit("/", ".tile")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        visit(f"/nodes/{node_id}/", ".gpu-card")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        visit(f"/gpus/{gpu_id}/", ".history")
        visit("/nodes/", "table, .empty")
        visit("/nodes/add/", "#test-connection")
        visit("/account/", "#content form")
        visit("/pools/", "table.pools")
        visit("/pools/csp/", ".pool-card .slice")
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        visit("/pools/add/", "#pool-form")
        visit(f"/allocations/{allocation_id}/", "#export-block")
        visit("/audit/", ".audit-entries")
        visit("/users/", "table.users")
        visit("/users/add/", "#id_username")
        visit("/tenants/add/", "fieldset.new-user-fields, #id_admin")
        visit("/idle/policies/", "table.reclaim-policies")
        visit("/idle/policies/add/", "#id_pool")
        visit("/accounting/prices/", "table.unit-prices")
        visit("/accounting/prices/add/", "#id_currency")
        visit("/api/docs/", ".opblock")
        visit("/api/redoc/", "[role=search], .menu-content")
        visit("/admin/", "#content")
        # The language menu's handler is a module now, not an inline attribute: it still works.
        page.goto(base + "/")
        page.select_option("#language-select", "zh-hans")
        expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
        page.select_option("#language-select", "en")
        expect(page.locator("html")).to_have_attribute("lang", "en")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "csp-fleet.png"), full_page=True)
    finally:
        page.close()
    assert not seen, seen
    unexpected = [line for line in console if "cdn.redoc.ly/redoc/logo-mini.svg" not in line]
    assert not unexpected, unexpected
