"""The 400, 403, 404 and 500 pages are the portal's: its look, the reader's language and a
way back to the fleet; under /api/ the same failures answer the API's JSON error."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.core.exceptions import SuspiciousOperation
from django.test import Client, override_settings
from django.urls import include, path
from playwright.sync_api import Browser, expect

from tests import procs


def _boom(request):
    raise RuntimeError("a bug")


def _suspicious(request):
    raise SuspiciousOperation("a forged header")


# A URLconf with two views that fail, beside the portal's own (and its handlers).
urlpatterns = [
    path("test-boom/", _boom),
    path("api/v1/test-boom/", _boom),
    path("test-suspicious/", _suspicious),
    path("", include("portal.urls")),
]
handler400 = "portal.api_errors.bad_request"
handler403 = "portal.api_errors.permission_denied"
handler404 = "portal.api_errors.not_found"
handler500 = "portal.api_errors.server_error"


def test_a_missing_page_is_the_portals_404_with_a_way_back(client, bob):
    client.force_login(bob)
    response = client.get("/no/such/page/")
    body = response.content.decode()
    assert response.status_code == 404
    assert "There is no such page" in body and 'href="/"' in body and "tabler.min.css" in body
    assert 'data-status="404"' in body


def test_the_404_page_speaks_the_readers_language(client):
    body = client.get("/no/such/page/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "页面不存在" in body and "返回集群总览" in body and "There is no such page" not in body


def test_a_refused_page_is_the_portals_403(client, bob):
    client.force_login(bob)
    response = client.get("/idle/policies/")
    body = response.content.decode()
    assert response.status_code == 403
    assert "You may not open this page" in body and 'href="/account/"' in body


@override_settings(ROOT_URLCONF=__name__)
def test_a_crash_is_the_portals_500_and_json_under_the_api(db):
    client = Client(raise_request_exception=False)
    page = client.get("/test-boom/")
    assert page.status_code == 500 and "went wrong on the portal" in page.content.decode()
    assert "a bug" not in page.content.decode()
    api = client.get("/api/v1/test-boom/")
    assert api.status_code == 500 and api.json()["error"]["code"] == "server_error"


@override_settings(ROOT_URLCONF=__name__)
def test_an_unreadable_request_is_the_portals_400(client):
    response = client.get("/test-suspicious/")
    body = response.content.decode()
    assert response.status_code == 400 and "could not read this request" in body
    assert "forged" not in body


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[str]:
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url


@pytest.mark.browser
def test_in_a_browser_the_404_page_loads_clean_and_leads_back(site, browser: Browser):
    context = browser.new_context(locale="zh-CN")
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and not m.text.startswith("Failed to load")
            and errors.append(m.text))  # fmt: skip
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        answer = page.goto(f"{site}/no/such/page/")
        assert answer is not None and answer.status == 404
        expect(page.locator("#error-page")).to_contain_text("页面不存在")
        page.locator("#error-home").click()
        expect(page).to_have_url(re.compile(r"/accounts/login/"))  # the fleet asks to log in
        assert errors == []
    finally:
        context.close()
