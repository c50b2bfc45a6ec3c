"""Sign in with the company's OpenID Connect provider in Chromium: the portal (daphne,
configured from the environment as in production) shows "Sign in with Corp SSO", the
provider (tests/oidc_provider.py) its own form; back at the portal the user is signed in,
a member of the tenant their group maps to. Logging out goes through the provider's logout
and back to the portal's login page."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from directory.models import GroupMapping, MappedRole
from quotas.models import Tenant
from tests import oidc_provider, procs
from tests.oidc_provider import idp  # noqa: F401 (the session's provider)

pytestmark = [pytest.mark.browser]


@pytest.fixture
def site(idp, transactional_db, child_env_for_test_db) -> Iterator[str]:  # noqa: F811
    idp.reset()
    tenant = Tenant.objects.create(name="Quant", slug="quant")
    GroupMapping.objects.create(group_dn="gpu-quant-users", tenant=tenant, role=MappedRole.MEMBER)
    env = {**child_env_for_test_db, **oidc_provider.environment(idp.issuer, "corp-sso")}
    with procs.daphne(env) as (url, _):
        yield url


def test_sign_in_with_the_provider_and_out_again(site, browser: Browser):
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(f"{site}/accounts/login/")
        page.get_by_role("link", name="Sign in with Corp SSO").click()
        expect(page).to_have_title("Corp IdP sign-in")
        page.fill("#idp-username", "dana")
        page.fill("#idp-password", oidc_provider.PASSWORDS["dana"])
        page.click("#idp-submit")
        expect(page).to_have_url(re.compile(rf"^{re.escape(site)}/(home/)?$"))  # signed in
        page.goto(f"{site}/tenants/")
        expect(page.locator('[data-tenant="quant"]')).to_be_visible()
        # Out: through the provider's logout, back to the portal's login page.
        page.get_by_role("button", name="User menu").click()
        expect(page.locator("#user-menu")).to_contain_text("dana")
        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(re.compile(rf"^{re.escape(site)}/accounts/login/"))
        page.get_by_role("link", name="Sign in with Corp SSO").click()
        expect(page).to_have_title("Corp IdP sign-in")  # its session ended too
    finally:
        context.close()
