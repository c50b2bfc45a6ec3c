"""The tenant pages in Chromium: the usage bars take their widths from the page's script,
with no content-security-policy violation."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from playwright.sync_api import expect

from tests import clients, procs
from tests.factories import PoolFactory, QuotaFactory, TenantFactory, held_allocation
from tests.test_browser_csp import RECORD_VIOLATIONS, _violations

pytestmark = [pytest.mark.browser, pytest.mark.stack]


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[str]:
    """daphne on the test database: a tenant holding a 50 % slice of its 4-card guarantee."""
    frank = get_user_model().objects.create_superuser("frank", password="frank-pw-1")
    tenant, pool = TenantFactory(name="Acme", slug="acme"), PoolFactory(name="shared-pool")
    QuotaFactory(tenant=tenant, pool=pool)
    held_allocation(tenant, pool, frank, timezone.now() - timedelta(hours=1), compute_pct=50)
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url


def test_the_usage_bars_are_drawn_under_the_policy(site, browser):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.add_init_script(RECORD_VIOLATIONS)
    try:
        clients.sign_in(page, "frank", at=site + "/accounts/login/", lands_on=r"/$")
        for path in ("/tenants/", "/tenants/acme/", "/tenants/acme/members/"):
            page.goto(site + path)
            expect(page.locator("#content").first).to_be_visible(timeout=20_000)
            assert _violations(page) == [], path
        page.goto(site + "/tenants/")
        # 1 vGPU of a guarantee of 4 and a limit of 8: the within-guarantee part is 12.5 %.
        bar = page.locator('[data-dimension="vgpus"] [data-width]').first
        expect(bar).to_have_attribute("style", re.compile(r"width: 12\.5%"))
    finally:
        page.close()
    assert errors == []
