"""In a browser: a member sees "Agent error" where a node manager reads the agent's words,
on first paint and as pushes arrive over the websocket (daphne on the test database)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from agents.models import Node
from telemetry import live
from tests import clients, procs, test_browser
from tests.factories import NodeFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.stack]

FIRST = "HTTP 500: first words from the agent"
SECOND = "HTTP 503: second words from the agent"


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, Node]]:
    node = NodeFactory(name="gpu-err", last_error=FIRST)
    UserFactory(username="bob")
    UserFactory(username="carol", permissions=["agents.change_node"])
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield f"{url}/", node


def _log_in(browser: Browser, site: str, user: str, path: str = "") -> Page:
    page = browser.new_page()
    clients.sign_in(page, user, at=site + path)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=20_000)
    return page


def test_members_see_a_generic_label_and_managers_the_agents_words(site, browser):
    url, node = site
    member = _log_in(browser, url, "bob")
    manager = _log_in(browser, url, "carol")
    member_page = _log_in(browser, url, "bob", f"nodes/{node.pk}/")
    manager_page = _log_in(browser, url, "carol", f"nodes/{node.pk}/")
    try:
        tile_error = '.tile [data-field="last_error"]'
        page_error = '[data-field="last_error"]'
        expect(member.locator(tile_error)).to_have_text("Agent error")
        expect(manager.locator(tile_error)).to_have_text(FIRST)
        expect(member_page.locator(page_error)).to_have_text("Agent error")
        expect(manager_page.locator(page_error)).to_have_text(FIRST)

        def push() -> None:
            Node.objects.filter(pk=node.pk).update(last_error=SECOND)
            live.publish_nodes([node.pk])

        test_browser.off_this_thread(push)
        expect(manager.locator(tile_error)).to_have_text(SECOND)
        expect(manager_page.locator(page_error)).to_have_text(SECOND)
        for page in (member, member_page):
            expect(page.locator(page_error).first).to_have_text("Agent error")
            assert not re.search("words from the agent", page.content())
    finally:
        for page in (member, manager, member_page, manager_page):
            page.close()
