"""The test clients, one of each kind; a test file calls these rather than building its own.

- ``api(user)``: the REST API as ``user`` (force-authenticated), or anonymous when None.
- ``bearer(key)`` / ``authorization(header)``: the REST API with a real token in the
  ``Authorization`` header, for what the token path itself decides (scopes, lockouts,
  rate limits, challenges).
- ``page(user)``: the server-rendered pages as ``user`` (force-logged-in), or anonymous.
- ``cookie_header(user)``: the ``cookie`` header of a session of ``user``'s, for websockets.
- ``sign_in(page, username)``: a real login through the login form, in a Playwright page.

Keyword arguments go to the client as Django's do (``REMOTE_ADDR=...``,
``enforce_csrf_checks=True``).
"""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from playwright.sync_api import Page, expect
from rest_framework.test import APIClient


def api(user: AbstractBaseUser | None = None, **defaults: Any) -> APIClient:
    """An API client authenticated as ``user`` without a token or a session; anonymous if None."""
    client = APIClient(**defaults)
    if user is not None:
        client.force_authenticate(user)
    return client


def authorization(header: str, **defaults: Any) -> APIClient:
    """An API client that sends ``header`` as its ``Authorization``, well formed or not."""
    client = APIClient(**defaults)
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


def bearer(key: str, **defaults: Any) -> APIClient:
    """An API client that authenticates with the API token ``key``, as a script would."""
    return authorization(f"Bearer {key}", **defaults)


def page(user: AbstractBaseUser | None = None, **defaults: Any) -> Client:
    """A browser-like client with a session of ``user``'s (no login form); anonymous if None."""
    client = Client(**defaults)
    if user is not None:
        client.force_login(user)
    return client


def cookie_header(user: AbstractBaseUser) -> tuple[bytes, bytes]:
    """The ``cookie`` header of a fresh session of ``user``'s, as a websocket handshake
    (Channels' communicator) sends it."""
    name = settings.SESSION_COOKIE_NAME
    return b"cookie", f"{name}={page(user).cookies[name].value}".encode()


def sign_in(
    browser_page: Page,
    username: str,
    password: str | None = None,
    *,
    at: str | None = None,
    lands_on: str | None = None,
) -> None:
    """Log in through the login form ``browser_page`` shows (or opens ``at`` first): the
    password defaults to the actors' ``<name>-pw-1``; ``lands_on``, a pattern the address
    must match once the login went through."""
    if at is not None:
        browser_page.goto(at)
    browser_page.fill("#id_username", username)
    browser_page.fill("#id_password", password if password is not None else f"{username}-pw-1")
    browser_page.click("button[type=submit]")
    if lands_on is not None:
        expect(browser_page).to_have_url(re.compile(lands_on))
