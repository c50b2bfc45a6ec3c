"""Sign-in through an OpenID Connect provider: a real one on loopback (django-oauth-toolkit in
a Django process of its own, tests/oidc_provider.py), the portal configured from the
environment as in production (portal/oidc_config.py).

The whole authorization code flow with PKCE is driven over HTTP: the portal's start, the
provider's login form, its redirect back, the portal's token and userinfo requests to the
provider. A test client plays the portal's side of the browser, a ``requests`` session the
provider's (the redirects are followed between the two as a browser would). Claims map to
tenants and roles through the same GroupMapping as LDAP's, again at each sign-in; a wrong
issuer, an expired ID token, a bad signature, another sign-in's nonce and a stray state
are refused, audited and end on a 4xx page; logout goes on to the provider's.
"""

from __future__ import annotations

import re
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils import timezone

from audit.interface import AuditEntry
from directory.models import DirectoryAccount, Source
from directory.oidc import forget_discovery
from portal.oidc_config import oidc_settings
from quotas.choices import Role
from quotas.models import Membership, Tenant
from quotas.permissions import is_platform_admin
from tests import clients, oidc_provider
from tests.factories import directory_mapped_tenant
from tests.oidc_provider import idp  # noqa: F401 (the session's provider)
from tokens.interface import issue

pytestmark = pytest.mark.django_db

ADDRESS = "203.0.113.41"
NAME = "corp-sso"
PORTAL_HOST = "testserver"


def _environment(monkeypatch, issuer: str, **more: str) -> None:
    for name, value in {**oidc_provider.environment(issuer, NAME), **more}.items():
        monkeypatch.setenv(name, value)


def _configure(settings, monkeypatch, issuer: str, **more: str) -> None:
    """What portal/settings.py does with the environment, for this test."""
    _environment(monkeypatch, issuer, **more)
    found = oidc_settings()
    for key, value in found.items():
        setattr(settings, key, value)
    settings.OIDC = found
    settings.AUTHENTICATION_BACKENDS = [
        "portal.security.LoginLockoutBackend",
        "directory.oidc.PortalOIDCBackend",
        "tokens.backends.PortalModelBackend",
    ]
    middleware = list(settings.MIDDLEWARE)
    middleware.insert(middleware.index("axes.middleware.AxesMiddleware"),
                      "directory.oidc.EndSessionMiddleware")  # fmt: skip
    settings.MIDDLEWARE = middleware
    forget_discovery()


@pytest.fixture
def provider(idp, settings, monkeypatch) -> oidc_provider.Provider:  # noqa: F811
    idp.reset()
    _configure(settings, monkeypatch, idp.issuer)
    return idp


@pytest.fixture
def quant(bob) -> Tenant:
    """The provider's groups mapped by name."""
    return directory_mapped_tenant(bob, lambda name: name)


class _Form(HTMLParser):
    """The first form of a page: its action and its inputs' values."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag == "form" and self.action is None:
            self.action = attrs.get("action") or ""
        elif tag == "input" and attrs.get("name"):
            self.fields[attrs["name"]] = attrs.get("value") or ""


class Browser:
    """One person's browser: the test client for the portal's pages (host testserver),
    a requests session for the provider's; redirects are followed across the two."""

    def __init__(self) -> None:
        self.portal = Client(REMOTE_ADDR=ADDRESS)
        self.web = requests.Session()

    def go(self, url: str, response=None):
        """Follow redirects from ``url`` until a page, or the portal's answer (its own
        redirects not followed): (the response, its URL)."""
        for _hop in range(15):
            parts = urlsplit(url)
            if parts.hostname in (PORTAL_HOST, None):
                path = parts.path + (f"?{parts.query}" if parts.query else "")
                response = self.portal.get(path)
                status, location = response.status_code, response.get("Location")
            else:
                response = self.web.get(url, allow_redirects=False, timeout=10)
                status, location = response.status_code, response.headers.get("Location")
            if status not in (301, 302, 303) or not location:
                return response, url
            following = requests.compat.urljoin(url, location)
            if parts.hostname in (PORTAL_HOST, None) and urlsplit(following).hostname in (
                PORTAL_HOST, None,
            ):  # fmt: skip
                return response, url
            url = following
        raise AssertionError(f"too many redirects, at {url}")

    def sign_in(self, username: str, password: str | None = None):
        """Click "Sign in with ...", fill in the provider's form when it asks; the
        portal's answer to the provider's redirect back, and the authorization request."""
        start = self.portal.get("/oidc/authenticate/")
        assert start.status_code == 302, start.content[:300]
        self.authorization = start["Location"]
        page, url = self.go(self.authorization)
        if urlsplit(url).hostname != PORTAL_HOST:  # the provider's login form
            form = _Form()
            form.feed(page.text)
            data = {**form.fields, "username": username,
                    "password": password or oidc_provider.PASSWORDS[username]}  # fmt: skip
            answer = self.web.post(requests.compat.urljoin(url, form.action), data=data,
                                   allow_redirects=False, timeout=10)  # fmt: skip
            if answer.status_code != 302:
                return answer  # the provider's form again (a wrong password)
            page, url = self.go(requests.compat.urljoin(url, answer.headers["Location"]))
        return page

    def signed_in(self) -> bool:
        return self.portal.get("/account/").status_code == 200


def _user(name: str):
    return get_user_model().objects.get(username=name)


def _role(user, tenant: Tenant) -> str | None:
    return (
        Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True).first()
    )


def test_discovery_names_the_issuer_and_the_endpoints(provider):
    from directory.oidc import discovery

    found = discovery()
    assert found["issuer"] == provider.issuer
    assert found["token_endpoint"].startswith(provider.url)
    assert "S256" in found["code_challenge_methods_supported"]
    assert found["end_session_endpoint"]


def test_the_login_page_offers_the_provider_only_when_configured(provider, settings):
    page = Client().get("/accounts/login/?next=/account/").content.decode()
    assert "Sign in with Corp SSO" in page
    assert 'href="/oidc/authenticate/?next=%2Faccount%2F"' in page
    settings.OIDC = {}
    assert "oidc-sign-in" not in Client().get("/accounts/login/").content.decode()
    assert Client().get("/oidc/authenticate/").status_code == 404


def test_the_code_flow_signs_in_with_pkce_and_syncs_the_claims(provider, quant):
    browser = Browser()
    answer = browser.sign_in("dana")
    assert answer.status_code == 302 and answer["Location"] == "/"
    asked = parse_qs(urlsplit(browser.authorization).query)
    assert asked["code_challenge_method"] == ["S256"] and asked["code_challenge"][0]
    assert asked["nonce"][0] and asked["state"][0]
    assert asked["scope"] == ["openid profile email groups"]
    assert browser.signed_in()
    dana = _user("dana")
    assert (dana.first_name, dana.last_name, dana.email) == ("Dana", "Li", "dana@corp.example")
    assert not dana.has_usable_password()
    account = DirectoryAccount.objects.get(user=dana)
    assert (account.source, account.directory, account.department) == (Source.OIDC, NAME, "Risk")
    assert account.subject and account.groups == ["gpu-quant-users"]
    login = AuditEntry.objects.filter(action="login.succeeded").latest("id")
    assert (login.actor_name, login.address, login.after) == ("dana", ADDRESS, {"directory": NAME})
    # The claims are read again at the next sign-in (the provider's session still open:
    # no form this time).
    provider.people["dana"].update(email="dana.li@corp.example", department="Treasury")
    provider.set()
    assert Browser().sign_in("dana").status_code == 302
    assert browser.sign_in("dana").status_code == 302
    dana.refresh_from_db()
    assert dana.email == "dana.li@corp.example"
    assert DirectoryAccount.objects.get(user=dana).department == "Treasury"
    assert get_user_model().objects.filter(username="dana").count() == 1


def test_a_wrong_password_at_the_provider_signs_nobody_in(provider):
    browser = Browser()
    page = browser.sign_in("dana", "not-her-password")
    assert "Wrong user name or password" in page.text
    assert not browser.signed_in()
    assert not get_user_model().objects.filter(username="dana").exists()


def test_groups_claims_map_to_tenants_and_roles(provider, quant):
    Browser().sign_in("dana")
    Browser().sign_in("erik")
    dana, erik = _user("dana"), _user("erik")
    assert _role(dana, quant) == Role.MEMBER
    assert _role(erik, quant) == Role.ADMIN  # the widest of his groups
    assert is_platform_admin(erik) and not is_platform_admin(dana)


def test_a_user_moved_between_groups_changes_role_at_the_next_sign_in(provider, quant):
    Browser().sign_in("dana")
    dana = _user("dana")
    assert _role(dana, quant) == Role.MEMBER
    provider.people["dana"]["groups"] = ["gpu-quant-approvers"]
    provider.set()
    assert _role(dana, quant) == Role.MEMBER  # nothing changes before she signs in again
    Browser().sign_in("dana")
    assert _role(dana, quant) == Role.APPROVER
    provider.people["dana"]["groups"] = []
    provider.set()
    Browser().sign_in("dana")
    assert _role(dana, quant) is None
    entry = AuditEntry.objects.filter(action="membership.delete").latest("id")
    assert entry.actor_id is None and NAME in entry.message and entry.address == ADDRESS
    Browser().sign_in("erik")
    assert is_platform_admin(_user("erik"))
    provider.people["erik"]["groups"].remove("portal-admins")
    provider.set()
    Browser().sign_in("erik")
    assert not is_platform_admin(_user("erik"))


def test_logout_ends_the_session_here_and_at_the_provider(provider, quant):
    browser = Browser()
    browser.sign_in("dana")
    answer = browser.portal.post("/accounts/logout/")
    assert answer.status_code == 302
    ending = urlsplit(answer["Location"])
    assert f"{ending.scheme}://{ending.netloc}{ending.path}" == f"{provider.issuer}/logout/"
    query = parse_qs(ending.query)
    assert query["id_token_hint"][0] and query["client_id"] == [oidc_provider.CLIENT_ID]
    assert not browser.signed_in()
    # The provider ends its own session and sends the browser back to the login page.
    page, url = browser.go(answer["Location"])
    assert urlsplit(url).path == "/accounts/login/" and page.status_code == 200
    # So the next sign-in asks for the password again.
    start = browser.portal.get("/oidc/authenticate/")
    form_page, form_url = browser.go(start["Location"])
    assert urlsplit(form_url).hostname != PORTAL_HOST and 'name="password"' in form_page.text
    # A local user's logout stays a plain one.
    local = clients.page(quant and _user("bob"))
    assert local.post("/accounts/logout/")["Location"] == "/accounts/login/"


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("issuer", "issuer"), ("expired", "expired"), ("signature", "signature"),
     ("nonce", "nonce"), ("audience", "audience")],
)  # fmt: skip
def test_a_wrong_id_token_is_refused_and_audited(provider, quant, fault, reason):
    provider.set(fault=fault)
    browser = Browser()
    answer = browser.sign_in("dana")
    assert answer.status_code == 403
    assert f'data-reason="{reason}"' in answer.content.decode()
    assert not browser.signed_in()
    assert not get_user_model().objects.filter(username="dana").exists()
    failed = AuditEntry.objects.filter(action="login.failed").latest("id")
    assert failed.address == ADDRESS
    assert failed.after["directories"] == [NAME] and failed.after["reason"] == reason
    # The same provider, its tokens right again: she signs in.
    provider.set(fault=None)
    assert browser.sign_in("dana").status_code == 302 and browser.signed_in()


def test_a_provider_naming_another_issuer_is_refused(provider, settings, monkeypatch):
    # The portal expects another issuer than the one the provider's discovery names.
    discovery_url = f"{provider.issuer}/.well-known/openid-configuration"
    _configure(settings, monkeypatch, f"{provider.url}/elsewhere", OIDC_DISCOVERY_URL=discovery_url)
    answer = Client(REMOTE_ADDR=ADDRESS).get("/oidc/authenticate/")
    assert answer.status_code == 403
    assert 'data-reason="issuer"' in answer.content.decode()


def _callback_of(browser: Browser, username: str) -> str:
    """A sign-in's way back to the portal (path and query: its code and state), caught
    before the browser delivers it."""
    start = browser.portal.get("/oidc/authenticate/")
    page, url = browser.go(start["Location"])
    form = _Form()
    form.feed(page.text)
    posted = browser.web.post(
        requests.compat.urljoin(url, form.action),
        data={**form.fields, "username": username,
              "password": oidc_provider.PASSWORDS[username]},
        allow_redirects=False, timeout=10,
    )  # fmt: skip
    authorize = browser.web.get(requests.compat.urljoin(url, posted.headers["Location"]),
                                allow_redirects=False, timeout=10)  # fmt: skip
    callback = urlsplit(authorize.headers["Location"])
    assert callback.path == "/oidc/callback/"
    return f"{callback.path}?{callback.query}"


def test_a_stolen_code_is_useless_without_its_pkce_verifier(provider, quant):
    # Someone who caught dana's code brings it back with a state of their own sign-in: the
    # state passes, but their PKCE verifier is not the one her code was issued for.
    stolen = parse_qs(urlsplit(_callback_of(Browser(), "dana")).query)["code"][0]
    attacker = Browser()
    start = attacker.portal.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    answer = attacker.portal.get(f"/oidc/callback/?code={stolen}&state={state}")
    assert answer.status_code == 403 and 'data-reason="token"' in answer.content.decode()
    assert not attacker.signed_in()
    assert not get_user_model().objects.filter(username="dana").exists()
    failed = AuditEntry.objects.filter(action="login.failed").latest("id")
    assert failed.after["reason"] == "token" and failed.after["directories"] == [NAME]


def test_a_stray_or_replayed_state_is_refused(provider, quant):
    browser = Browser()
    answer = browser.portal.get("/oidc/callback/?code=forged&state=not-begun-here")
    assert answer.status_code == 400 and 'data-reason="state"' in answer.content.decode()
    failed = AuditEntry.objects.filter(action="login.failed").latest("id")
    assert failed.after["reason"] == "state" and failed.address == ADDRESS
    # A real answer, captured and sent again after its sign-in: its state is spent.
    back = _callback_of(browser, "dana")
    assert browser.portal.get(back).status_code == 302
    assert Client(REMOTE_ADDR=ADDRESS).get(back).status_code == 400  # another browser
    assert browser.portal.get(back).status_code == 400  # the same one, again


def test_an_error_from_the_provider_is_refused(provider):
    browser = Browser()
    start = browser.portal.get("/oidc/authenticate/")
    state = parse_qs(urlsplit(start["Location"]).query)["state"][0]
    answer = browser.portal.get(f"/oidc/callback/?error=access_denied&state={state}")
    assert answer.status_code == 403 and "access_denied" in answer.content.decode()
    assert not browser.signed_in()


def test_an_existing_portal_account_is_never_taken_over_by_the_provider(provider, alice, bob):
    answer = Browser().sign_in("alice")
    assert answer.status_code == 403 and 'data-reason="local_account"' in answer.content.decode()
    assert not DirectoryAccount.objects.filter(user=alice).exists()
    alice.refresh_from_db()
    assert alice.has_usable_password() and alice.email != "alice@evil.example"
    failed = AuditEntry.objects.filter(action="login.failed").latest("id")
    assert failed.after["username"] == "alice" and failed.target_id == str(alice.pk)
    # A plain local user of the provider's user's name neither.
    answer = Browser().sign_in("bob")
    assert answer.status_code == 403 and 'data-reason="local_account"' in answer.content.decode()
    bob.refresh_from_db()
    assert bob.has_usable_password() and not DirectoryAccount.objects.filter(user=bob).exists()


def test_a_deactivated_users_sessions_tokens_and_next_sign_in_are_refused(provider, quant, alice):
    browser = Browser()
    browser.sign_in("dana")
    dana = _user("dana")
    _token, key = issue(dana, name="ci")
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 200
    # The provider is not asked between sign-ins: a platform admin deactivates her here.
    page = clients.page(alice).get(f"/users/{dana.pk}/").content.decode()
    assert 'data-source="oidc"' in page and "/deactivate/" in page
    assert "/password-link/" not in page
    assert clients.page(alice).post(f"/users/{dana.pk}/deactivate/").status_code == 302
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401
    assert not browser.signed_in()
    # Still enabled at the provider, she is refused here until reactivated here.
    answer = Browser().sign_in("dana")
    assert answer.status_code == 403 and 'data-reason="inactive"' in answer.content.decode()
    dana.refresh_from_db()
    assert not dana.is_active
    api = clients.api(alice)
    assert api.get(f"/api/v1/users/{dana.pk}/").json()["source"] == "oidc"
    assert api.post(f"/api/v1/users/{dana.pk}/password-link/").status_code == 403


def test_tokens_are_checked_at_the_provider_with_the_refresh_token(
    provider, quant, settings, alice
):
    settings.OIDC_TOKEN_RECHECK_S = 60
    browser = Browser()
    browser.sign_in("dana")
    dana = _user("dana")
    account = DirectoryAccount.objects.get(user=dana)
    assert account.refresh_token  # kept encrypted, and not shown in the admin
    admin_page = clients.page(alice).get(f"/admin/directory/directoryaccount/{account.pk}/change/")
    assert admin_page.status_code == 200
    assert account.refresh_token not in admin_page.content.decode()
    _token, key = issue(dana, name="ci")
    api = clients.bearer(key)
    assert api.get("/api/v1/nodes/").status_code == 200  # a fresh answer: not asked
    old = timezone.now() - timedelta(minutes=5)
    DirectoryAccount.objects.filter(pk=account.pk).update(last_sync=old)
    assert api.get("/api/v1/nodes/").status_code == 200  # asked: still honoured
    account.refresh_from_db()
    assert account.last_sync > old and account.refresh_token
    # Disabled at the provider: its refresh token is refused, and so is her API token.
    provider.set(disabled=["dana"])
    DirectoryAccount.objects.filter(pk=account.pk).update(last_sync=old)
    assert api.get("/api/v1/nodes/").status_code == 401
    assert api.get("/api/v1/nodes/").status_code == 401  # until she signs in again
    assert not DirectoryAccount.objects.get(pk=account.pk).refresh_token
    # Enabled again there and signed in again: the token works again.
    provider.set(disabled=[])
    assert browser.sign_in("dana").status_code == 302
    DirectoryAccount.objects.filter(pk=account.pk).update(last_sync=old)
    assert api.get("/api/v1/nodes/").status_code == 200
    # The provider away: let through on the last answer.
    settings.OIDC_DISCOVERY_URL = "http://127.0.0.1:9/.well-known/openid-configuration"
    forget_discovery()
    DirectoryAccount.objects.filter(pk=account.pk).update(last_sync=old)
    assert api.get("/api/v1/nodes/").status_code == 200
    # Off (the default): never asked.
    settings.OIDC_TOKEN_RECHECK_S = 0
    provider.set(disabled=["dana"])
    assert api.get("/api/v1/nodes/").status_code == 200


def test_the_directory_page_shows_the_provider(provider, quant, alice):
    Browser().sign_in("dana")
    text = clients.page(alice).get("/directory/").content.decode()
    assert provider.issuer in text and NAME in text and 'data-user="dana"' in text


def test_no_issuer_means_no_provider_settings(monkeypatch):
    monkeypatch.delenv("OIDC_ISSUER", raising=False)
    assert oidc_settings() == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [("OIDC_CLIENT_ID", ""), ("OIDC_CLIENT_SECRET", ""), ("OIDC_SCOPES", "profile email"),
     ("OIDC_SIGN_ALGO", "HS256"), ("OIDC_ISSUER", "ftp://idp.example")],
)  # fmt: skip
def test_a_malformed_provider_setting_fails_with_its_name(monkeypatch, name, value):
    _environment(monkeypatch, "https://idp.example/realms/corp")
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=re.escape(name)):
        oidc_settings()
