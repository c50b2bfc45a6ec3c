"""A platform admin makes a user on the Users page and adds them to a tenant as a member
(the developer of the design); the new user opens the link shown, chooses a password and
signs in with it: in Chromium against daphne, under the site's content-security policy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import Browser, expect

from tests import clients, procs
from tests.factories import TenantFactory
from tests.test_browser_csp import RECORD_VIOLATIONS, _violations

pytestmark = [pytest.mark.browser]
PASSWORD = "Lantern-orchid-7319"


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[str]:
    get_user_model().objects.create_superuser("frank", password="frank-pw-1")
    TenantFactory(name="Acme", slug="acme")
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url


def test_a_new_user_made_and_invited_by_an_admin_signs_in_with_the_link_shown(
    site, browser: Browser
):
    admin = browser.new_context()
    page = admin.new_page()
    page.add_init_script(RECORD_VIOLATIONS)
    try:
        clients.sign_in(page, "frank", at=f"{site}/accounts/login/", lands_on=r"/$")
        page.get_by_role("link", name="Users").click()
        page.get_by_role("link", name="Add user").click()
        page.fill("#id_username", "nina")
        page.fill("#id_first_name", "Nina")
        page.fill("#id_email", "nina@example.com")
        page.get_by_role("button", name="Save").click()
        shown = page.locator("#password-link")
        expect(shown).to_be_visible()
        link = shown.inner_text().strip()
        assert link.startswith(f"{site}/accounts/set-password/"), link
        assert _violations(page) == []

        # Add her to Acme as a member; the new-user fields stay folded until asked for.
        page.goto(f"{site}/tenants/acme/members/")
        expect(page.locator("fieldset.new-user-fields")).to_be_hidden()
        page.check("#id_new_user")
        expect(page.locator("fieldset.new-user-fields")).to_be_visible()
        page.uncheck("#id_new_user")
        page.fill("#id_username", "nina")
        page.select_option("#id_role", "member")
        page.get_by_role("button", name="Add").click()
        expect(page.locator('tr[data-member="nina"]')).to_be_visible()
        assert _violations(page) == []
    finally:
        admin.close()

    # Nina, in a browser of her own: the link, her password, then signing in with it.
    own = browser.new_context()
    page = own.new_page()
    try:
        page.goto(link)
        page.fill("#id_new_password1", PASSWORD)
        page.fill("#id_new_password2", PASSWORD)
        page.get_by_role("button", name="Set password").click()
        expect(page.get_by_role("heading", name="Password set")).to_be_visible()
        page.get_by_role("link", name="Log in").click()
        clients.sign_in(page, "nina", PASSWORD, lands_on=r"/$")
        page.goto(f"{site}/tenants/")
        expect(page.locator('[data-tenant="acme"]')).to_be_visible()
        # Used once: the link no longer opens the form.
        page.goto(link)
        expect(page.locator("#invalid-link")).to_be_visible()
    finally:
        own.close()
