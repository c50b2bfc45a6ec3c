"""DONE-WHEN for the alert pages: a tenant's approver has their home open (where "/" sends
them; it carries the fleet dashboard's firing strip); an event of their tenant fires and
appears on it without a reload (pushed over /ws/alerts/),
while another tenant's does not; they open it and acknowledge it on the event page, and
the dashboard's strip lets it go. Daphne serves the portal on the test database."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import pytest
from django.db import connection
from playwright.sync_api import Browser, expect

from alerts import events
from alerts.evaluate import RuleSpec
from alerts.models import Rule
from tests import clients, procs
from tests.factories import gpu_team

pytestmark = [pytest.mark.browser]
ARTIFACTS = procs.REPO / "test-artifacts"


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, dict]]:
    acme, bravo = gpu_team("acme"), gpu_team("bravo")
    names = {"approver": acme.approver.username, "acme": acme.tenant.pk,
             "bravo": bravo.tenant.pk}  # fmt: skip
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url, names


def fire(tenant_id: int, fingerprint: str, summary: str) -> None:
    """Fire the quota rule's event as the business beat would, from a thread of its own:
    Playwright's loop in the test's thread refuses the ORM."""

    def run() -> None:
        try:
            rule = Rule.objects.get(key="quota-used")
            spec = RuleSpec(rule.pk, rule.key, rule.name, rule.condition, severity="warning")
            what = events.Occurrence(fingerprint=fingerprint, scope=f"tenant:{fingerprint}",
                                     summary=summary, tenant_id=tenant_id)  # fmt: skip
            events.fire(spec, what)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def test_a_firing_event_appears_on_the_dashboard_live_and_is_acknowledged(site, browser: Browser):
    url, names = site
    context = browser.new_context()
    page = context.new_page()
    try:
        clients.sign_in(
            page, names["approver"], at=f"{url}/accounts/login/?next=/", lands_on=r"/home/$"
        )
        strip = page.locator("#firing-events")
        expect(strip.locator("#firing-none")).to_be_visible()
        expect(strip).to_have_attribute("data-live", "true", timeout=10_000)
        page.evaluate("() => { window.__notReloaded = true; }")

        fire(names["bravo"], "bravo-quota", "bravo is nearly out")
        fire(names["acme"], "acme-quota", "acme is nearly out")
        item = strip.locator(".firing-event")
        expect(item).to_have_count(1, timeout=15_000)
        expect(item).to_contain_text("Quota more than 90 % used")
        assert "bravo" not in strip.inner_text()
        assert page.evaluate("() => window.__notReloaded === true"), "the page reloaded"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "alerts-dashboard.png"), full_page=True)

        item.locator("a").click()
        expect(page).to_have_url(re.compile(r"/alerts/events/\d+/$"))
        page.click("#acknowledge")
        expect(page.locator('[data-event-state="acknowledged"]')).to_be_visible()
        expect(page.locator("#acknowledged-by")).to_contain_text(names["approver"])
        page.screenshot(path=str(ARTIFACTS / "alerts-acknowledged.png"), full_page=True)

        page.goto(f"{url}/")
        expect(page.locator("#firing-events .firing-event")).to_have_count(0)
    finally:
        context.close()
