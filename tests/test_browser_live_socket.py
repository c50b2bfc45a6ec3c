"""The one reconnecting websocket (static/js/live-socket.js) behind the fleet dashboard, its
firing-alerts strip and the requests pages: each socket runs through Playwright's websocket
route to the real daphne, and the route closes the page's side the way the server would.
A broken socket comes back after a second and the page says so; a 4404 ends it; a 4401
reloads the page, except from the alerts strip, which leaves that to the fleet socket."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, WebSocketRoute, expect

from tests import procs
from tests.factories import UserFactory, gpu_team

pytestmark = [pytest.mark.browser]
LIVE = re.compile(r"/ws/(fleet|alerts|requests)/$")


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, str]]:
    team = gpu_team("acme")
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url, team.approver.username


@pytest.fixture
def fleet_viewer(transactional_db) -> str:
    """Who "/" shows the fleet: a tenant's approver there lands on their home instead."""
    return UserFactory(username="vic", permissions=["agents.view_node"]).username


def routed(page: Page) -> dict[str, list[WebSocketRoute]]:
    """Every live socket the page opens, by kind, passed through to the server."""
    sockets: dict[str, list[WebSocketRoute]] = {"fleet": [], "alerts": [], "requests": []}

    def through(ws: WebSocketRoute) -> None:
        sockets[LIVE.search(ws.url)[1]].append(ws)
        ws.connect_to_server()

    page.route_web_socket(LIVE, through)
    return sockets


def sign_in(page: Page, url: str, user: str, path: str) -> None:
    page.goto(f"{url}/accounts/login/?next={path}")
    page.fill("#id_username", user)
    page.fill("#id_password", f"{user}-pw-1")
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(re.escape(path) + "$"))


def test_the_dashboards_sockets_come_back_after_a_break_and_stop_when_told(
    site, fleet_viewer, browser: Browser
):
    url, _ = site
    context = browser.new_context()
    page = context.new_page()
    try:
        sockets = routed(page)
        sign_in(page, url, fleet_viewer, "/")
        status, strip = page.locator("#live-status"), page.locator("#firing-events")
        expect(status).to_have_attribute("data-state", "live", timeout=10_000)
        expect(strip).to_have_attribute("data-live", "true", timeout=10_000)
        page.evaluate("() => { window.__notReloaded = true; }")

        # The server goes away (1011): both say so, and both are back a second later; the
        # strip fetches once what it may have missed.
        sockets["fleet"][-1].close(code=1011, reason="restart")
        sockets["alerts"][-1].close(code=1011, reason="restart")
        expect(status).to_have_attribute("data-state", "reconnecting")
        expect(strip).to_have_attribute("data-live", "false")
        expect(status).to_have_attribute("data-state", "live", timeout=10_000)
        expect(strip).to_have_attribute("data-live", "true", timeout=10_000)
        expect(strip).to_have_attribute("data-refreshed", "1", timeout=10_000)
        assert len(sockets["fleet"]) == len(sockets["alerts"]) == 2

        # Signed out, seen by the alerts strip: it stops and leaves the reload to the fleet.
        sockets["alerts"][-1].close(code=4401, reason="signed out")
        expect(strip).to_have_attribute("data-live", "false")
        page.wait_for_timeout(2_500)  # past the first retry's second
        assert len(sockets["alerts"]) == 2
        assert page.evaluate("() => window.__notReloaded === true"), "the strip reloaded"

        # Gone (4404): the fleet socket stops trying.
        sockets["fleet"][-1].close(code=4404, reason="gone")
        expect(status).to_have_attribute("data-state", "reconnecting")
        page.wait_for_timeout(2_500)
        assert len(sockets["fleet"]) == 2

        # Signed out, seen by a page's own socket: the page reloads, which opens both again.
        page.reload()
        expect(status).to_have_attribute("data-state", "live", timeout=10_000)
        with page.expect_event("load", timeout=10_000):
            sockets["fleet"][-1].close(code=4401, reason="signed out")
    finally:
        context.close()


def test_the_requests_page_says_it_reconnects_in_the_readers_words(site, browser: Browser):
    url, approver = site
    context = browser.new_context(locale="zh-CN", extra_http_headers={"Accept-Language": "zh-hans"})
    page = context.new_page()
    try:
        sockets = routed(page)
        sign_in(page, url, approver, "/approvals/")
        status = page.locator("#live-status")
        expect(status).to_have_attribute("data-state", "live", timeout=10_000)
        expect(status).to_have_text(status.get_attribute("data-live") or "")
        assert status.get_attribute("data-live") != "Live", "the page is not in Chinese"

        sockets["requests"][-1].close(code=1011, reason="restart")
        expect(status).to_have_attribute("data-state", "reconnecting")
        expect(status).to_have_text(status.get_attribute("data-reconnecting") or "")
        expect(status).to_have_attribute("data-state", "live", timeout=10_000)
        expect(page.locator("#live-part")).to_have_attribute("data-refreshed", "1")
        assert len(sockets["requests"]) == 2
    finally:
        context.close()
