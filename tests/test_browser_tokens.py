"""The Account page's Copy button beside a new API token, in Chromium against daphne: it
puts exactly the key shown on the clipboard (and the key works); without a Clipboard API
(plain HTTP) it selects the key for the person to copy, and says so."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests import clients, procs
from tests.factories import UserFactory
from tests.live_api import call

pytestmark = [pytest.mark.browser]

# Runs before the page's scripts: a browser without navigator.clipboard, as on plain HTTP.
NO_CLIPBOARD = "Object.defineProperty(Navigator.prototype, 'clipboard', {get: () => undefined});"


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[str]:
    UserFactory(username="tara")
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url


def signed_in(context: BrowserContext, url: str) -> Page:
    page = context.new_page()
    clients.sign_in(
        page, "tara", at=f"{url}/accounts/login/?next=/account/", lands_on=r"/account/$"
    )
    return page


def new_token(page: Page, name: str) -> str:
    """Make a token through the page's form; the key it shows, once."""
    page.fill("#id_name", name)
    page.select_option("#id_scope", "read")
    page.fill("#id_expires_in_days", "7")
    page.get_by_role("button", name="Create token").click()
    shown = page.locator("#new-api-token")
    expect(shown).to_be_visible()
    key = shown.inner_text().strip()
    assert re.fullmatch(r"gpp_\w+_[\w-]+", key), key
    return key


def test_copy_puts_exactly_the_key_shown_on_the_clipboard(site, browser: Browser):
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site)
    try:
        page = signed_in(context, site)
        key = new_token(page, "laptop")
        page.evaluate("() => navigator.clipboard.writeText('something else')")
        copy = page.locator("button[data-copy=new-api-token]")
        expect(copy).to_have_text("Copy")
        copy.click()
        expect(copy).to_have_text("Copied")
        assert page.evaluate("() => navigator.clipboard.readText()") == key
        # What was copied is the token itself: it calls the API as tara.
        answer = call(site, "GET", "/api/v1/tokens/", f"Bearer {key}")
        assert answer.status == 200
        assert [token["name"] for token in answer.body["results"]] == ["laptop"]
        # Shown once: a reload shows no key any more.
        page.reload()
        expect(page.locator("#new-api-token")).to_have_count(0)
    finally:
        context.close()


def test_without_a_clipboard_copy_selects_the_key_and_says_to_copy_it(site, browser: Browser):
    context = browser.new_context()
    context.add_init_script(NO_CLIPBOARD)
    try:
        page = signed_in(context, site)
        key = new_token(page, "ci")
        copy = page.locator("button[data-copy=new-api-token]")
        expect(copy).to_have_text("Copy")
        copy.click()
        assert page.evaluate("() => window.getSelection().toString().trim()") == key
        expect(copy).to_have_text("Selected: press Ctrl+C")
    finally:
        context.close()
