"""Sign-in through an OpenID Connect provider (settings: portal/oidc_config.py), on
mozilla-django-oidc: authorization code with PKCE (S256), a state and a nonce per sign-in.

The provider is a second company directory, not a system of its own: its ID token and
userinfo claims give the name, e-mail and department, its groups claim is matched against
the same ``GroupMapping`` rows (the group's name or DN as the provider sends it), and
``sync.apply_account`` applies them at every sign-in. The user is found by the provider's
``sub`` (kept on their ``DirectoryAccount``), and is named by ``OIDC_USERNAME_CLAIM``; an
existing portal account of that name (local, a service account, another directory's or
another subject's) is never taken over.

The ID token is checked here rather than by the library, which checks neither issuer nor
audience: signature (a key from the provider's JWKS, ``OIDC_RP_SIGN_ALGO`` only), ``iss`` equal
to OIDC_ISSUER, ``aud`` holding our client id, ``exp`` and ``iat`` (with ``OIDC_LEEWAY_S``) and
the nonce. Any refusal (``Refused``) is a failed login in the audit log, with the address and
the directory, and a 4xx page that says which check failed; nobody is signed in.

The provider's endpoints come from its discovery document, whose ``issuer`` must be
OIDC_ISSUER itself (OpenID Connect Discovery 1.0, section 4.3); it is kept for an hour.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.core.exceptions import PermissionDenied, SuspiciousOperation, ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from audit.interface import request_address
from directory import sync
from directory.models import DirectoryAccount, Source
from portal import crypto
from portal.security import lockout_message

log = logging.getLogger("directory")

DISCOVERY_TTL_S = 3600
# mozilla-django-oidc's settings for the provider's endpoints, and the discovery keys.
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_discovered: dict[str, Any] = {}
_lock = threading.Lock()


class Refused(PermissionDenied):
    """A sign-in refused: ``reason`` is a short code (the audit log's), ``message`` the
    page's, ``status`` the page's status (403, or 502 with the provider away)."""

    def __init__(self, reason: str, message: str, status: int = 403) -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


def directory_name() -> str:
    return getattr(settings, "OIDC_DIRECTORY_NAME", "") or "oidc"


def discovery(refresh: bool = False) -> dict[str, Any]:
    """The provider's discovery document (cached DISCOVERY_TTL_S); Refused when it cannot
    be read or names another issuer."""
    url = settings.OIDC_DISCOVERY_URL
    with _lock:
        found = _discovered.get(url)
        if found and not refresh and time.monotonic() - found[0] < DISCOVERY_TTL_S:
            return found[1]
    try:
        response = requests.get(url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        log.warning("OpenID Connect discovery failed: %s %s", url, exc)
        raise Refused("unreachable", _("The identity provider could not be reached."), 502) from exc
    if document.get("issuer", "").rstrip("/") != settings.OIDC_ISSUER:
        raise Refused(
            "issuer",
            _("The identity provider names another issuer (%(found)s) than the portal expects.")
            % {"found": str(document.get("issuer", ""))[:200]},
        )
    with _lock:
        _discovered[url] = (time.monotonic(), document)
    return document


def forget_discovery() -> None:
    """Read the discovery document again at the next sign-in (a provider moved, tests)."""
    with _lock:
        _discovered.clear()


def _get_settings(attr: str, *args: Any) -> Any:
    if attr in ENDPOINTS:
        value = discovery().get(ENDPOINTS[attr])
        if not value:
            message = _("The identity provider's discovery document lacks %(key)s.")
            raise Refused("discovery", message % {"key": ENDPOINTS[attr]}, 502)
        return value
    return getattr(settings, attr, *args) if args else getattr(settings, attr)


def _note(request: HttpRequest | None, **facts: str) -> None:
    """What the audit log's failed-login entry reads (audit/logins.py) and the page shows."""
    if request is None:
        return
    noted = getattr(request, "login_directories", [])
    if directory_name() not in noted:
        request.login_directories = [*noted, directory_name()]
    for key, value in facts.items():
        setattr(request, key, value)


def _claim_list(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return []
    return sorted({str(v).strip()[:1024] for v in value if str(v).strip()})


def _text(claims: dict[str, Any], name: str, limit: int) -> str:
    value = claims.get(name) if name else None
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "").strip()[:limit]


class PortalOIDCBackend(OIDCAuthenticationBackend):
    get_settings = staticmethod(_get_settings)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The endpoints are read when a sign-in needs them (discovery), not when Django
        # builds its backends for every page.
        self.UserModel = get_user_model()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("OIDC_"):
            return _get_settings(name, None)
        raise AttributeError(name)

    def authenticate(self, request: Any, **kwargs: Any) -> Any:
        if request is None or "code_verifier" not in kwargs:
            return None  # not an OpenID Connect callback (a password form, a test login)
        _note(request)
        try:
            user = super().authenticate(request, **kwargs)
            if user is None:
                raise Refused("claims", _("The identity provider's answer did not name a user."))
        except Refused as exc:
            refused = exc
        except requests.HTTPError as exc:
            # The token endpoint refused the code (used, expired, or the PKCE verifier).
            log.warning("OpenID Connect token request refused: %s", exc)
            refused = Refused("token", _("The identity provider refused to issue a token."))
        except requests.RequestException as exc:
            log.warning("OpenID Connect provider away: %s", exc)
            refused = Refused("unreachable", _("The identity provider could not be reached."), 502)
        else:
            user.login_directory = directory_name()
            return user
        # Django turns the refusal into user_login_failed (the audit entry reads the notes)
        # and a None; the callback's page reads the refusal from the request.
        _note(request, login_refusal=refused.reason, oidc_refused=refused)
        raise refused

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The ID token's claims once every check passed; Refused at the first that fails."""
        if not token:
            raise Refused("token", _("The identity provider sent no ID token."))
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise Refused("signature", _("The ID token is not a signed token.")) from exc
        algorithm = settings.OIDC_RP_SIGN_ALGO
        if header.get("alg") != algorithm:
            message = _("The ID token is signed with %(alg)s, not %(expected)s.")
            found = str(header.get("alg"))[:20]
            raise Refused("signature", message % {"alg": found, "expected": algorithm})
        try:
            key = self.retrieve_matching_jwk(token)
        except (SuspiciousOperation, KeyError) as exc:  # no key of that id, or none named
            raise Refused(
                "signature", _("No key of the identity provider signed this ID token.")
            ) from exc
        try:
            claims = jwt.decode(
                token, key, algorithms=[algorithm], audience=settings.OIDC_RP_CLIENT_ID,
                issuer=settings.OIDC_ISSUER, leeway=settings.OIDC_LEEWAY_S,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )  # fmt: skip
        except jwt.InvalidSignatureError as exc:
            raise Refused("signature", _("The ID token's signature does not verify.")) from exc
        except jwt.ExpiredSignatureError as exc:
            raise Refused("expired", _("The ID token has expired.")) from exc
        except jwt.InvalidIssuerError as exc:
            raise Refused("issuer", _("The ID token comes from another issuer.")) from exc
        except jwt.InvalidAudienceError as exc:
            raise Refused("audience", _("The ID token was issued to another client.")) from exc
        except jwt.PyJWTError as exc:
            raise Refused("token", _("The ID token is not valid: %(why)s") % {"why": exc}) from exc
        if "nonce" in kwargs and claims.get("nonce") != kwargs["nonce"]:
            raise Refused("nonce", _("The ID token answers another sign-in (its nonce differs)."))
        self.id_claims = claims
        return claims

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        # Kept for the refresh token (get_or_create_user stores it).
        self.token_info = super().get_token(payload)
        return self.token_info

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict:
        """Userinfo's claims over the ID token's, for the same subject only (OpenID
        Connect Core 5.3.2: a userinfo answer for another ``sub`` is not used)."""
        info = super().get_userinfo(access_token, id_token, payload)
        if str(info.get("sub", "")) != str(payload.get("sub", "")):
            raise Refused("claims", _("The identity provider's userinfo names another user."))
        return {**payload, **info}

    @transaction.atomic
    def get_or_create_user(self, access_token: str, id_token: str, payload: dict) -> Any:
        claims = self.get_userinfo(access_token, id_token, payload)
        subject = str(claims.get("sub", ""))[:255]
        username = _text(claims, settings.OIDC_USERNAME_CLAIM, 150)
        if not subject or not username:
            message = _("The identity provider's answer lacks the %(claim)s claim.")
            missing = settings.OIDC_USERNAME_CLAIM if subject else "sub"
            raise Refused("claims", message % {"claim": missing})
        self.request.login_username = username
        user = self._user_for(subject, username)
        user.first_name = _text(claims, "given_name", 150)
        user.last_name = _text(claims, "family_name", 150)
        user.email = _text(claims, "email", 254)
        user.save()
        account = sync.apply_account(
            user, source=Source.OIDC, name=directory_name(), subject=subject,
            groups=_claim_list(claims.get(settings.OIDC_GROUPS_CLAIM)),
            department=_text(claims, settings.OIDC_DEPARTMENT_CLAIM, 200),
            address=request_address(self.request), reactivate=False,
        )  # fmt: skip
        refresh = str(getattr(self, "token_info", {}).get("refresh_token") or "")
        account.refresh_token = crypto.encrypt(refresh) if refresh else ""
        account.save(update_fields=["refresh_token"])
        return user

    def _user_for(self, subject: str, username: str) -> Any:
        """The user this subject signed in as before, or a new one named ``username``; never
        a local account or another directory's."""
        account = (
            DirectoryAccount.objects.select_related("user")
            .filter(directory=directory_name(), subject=subject).first()
        )  # fmt: skip
        if account is not None:
            if not account.user.is_active:
                raise Refused("inactive", _("This account is disabled in the portal."))
            if account.user.get_username() != username:
                log.info("OpenID Connect user %s renamed %s", account.user, username)
            return account.user
        model = self.UserModel
        user = model._default_manager.filter(**{model.USERNAME_FIELD: username}).first()
        if user is None:
            user = model(**{model.USERNAME_FIELD: username})
            user.set_unusable_password()
            try:
                user.full_clean(exclude=["password"])
            except ValidationError as exc:
                raise Refused("claims", _("The name %(name)s cannot be a portal user name.")
                              % {"name": username}) from exc  # fmt: skip
            return user
        # Never taken over, whoever holds the name (a local user, a superuser, a service
        # account, another directory's or another subject's): a provider may let its users
        # choose their own name, so a name alone is no proof of being that portal user.
        message = _("%(name)s is already a portal account (local, or another directory's): "
                    "it is not taken over by the identity provider.")  # fmt: skip
        raise Refused("local_account", message % {"name": username})

    def get_user(self, user_id: Any) -> Any:
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


class AuthenticateView(OIDCAuthenticationRequestView):
    """Off to the provider's authorization endpoint (with state, nonce and PKCE)."""

    get_settings = staticmethod(_get_settings)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = _get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except Refused as exc:
            return refusal_page(request, exc.reason, exc.message, exc.status)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


class CallbackView(OIDCAuthenticationCallbackView):
    """The provider's redirect back. A wrong or missing state, an error from the provider
    and every refusal of the backend end on the refusal page, audited as a failed login."""

    get_settings = staticmethod(_get_settings)

    def get(self, request: HttpRequest) -> HttpResponse:
        state = request.GET.get("state")
        if request.GET.get("error"):
            error = request.GET.get("error", "")[:100]
            _failed(request, "provider_error")
            message = _("The identity provider did not sign you in (%(error)s).")
            return refusal_page(request, "provider_error", message % {"error": error})
        if not request.GET.get("code") or not state:
            _failed(request, "state")
            return refusal_page(
                request, "state", _("The sign-in answer lacks its code or state."), 400
            )
        if state not in (request.session.get("oidc_states") or {}):
            # Not a sign-in this browser began (forged, replayed, or another browser's).
            _failed(request, "state")
            message = _("This sign-in answer does not belong to a sign-in begun here: start again.")
            return refusal_page(request, "state", message, 400)
        return super().get(request)

    def login_failure(self) -> HttpResponse:
        refused = getattr(self.request, "oidc_refused", None)
        if refused is not None:
            return refusal_page(self.request, refused.reason, refused.message, refused.status)
        if getattr(self.request, "refused_by_lockout", False):
            return refusal_page(self.request, "locked_out", lockout_message())
        return refusal_page(self.request, "inactive", _("This account is disabled in the portal."))


def _failed(request: HttpRequest, reason: str) -> None:
    """A failed login refused before any backend ran: the same signal Django sends."""
    from django.contrib.auth.signals import user_login_failed

    _note(request, login_refusal=reason)
    user_login_failed.send(sender=__name__, credentials={}, request=request)


def refusal_page(
    request: HttpRequest, reason: str, message: str, status: int = 403
) -> HttpResponse:
    context = {"reason": reason, "message": message, "provider": settings.OIDC_PROVIDER_NAME}
    return render(request, "directory/oidc_refused.html", context, status=status)


def end_session_url(request: HttpRequest) -> str | None:
    """Where to send a user signing out whose session came from the provider: its
    end_session_endpoint (RP-initiated logout 1.0), or None when it offers none."""
    id_token = request.session.get("oidc_id_token")
    if not id_token:
        return None
    try:
        endpoint = discovery().get("end_session_endpoint")
    except Refused:
        return None
    if not endpoint:
        return None
    back = request.build_absolute_uri(reverse(settings.LOGOUT_REDIRECT_URL))
    query = urlencode({"id_token_hint": id_token, "post_logout_redirect_uri": back,
                       "client_id": settings.OIDC_RP_CLIENT_ID})  # fmt: skip
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"


def _on_logout(sender: Any, request: HttpRequest | None, user: Any = None, **kwargs: Any) -> None:
    # Before Django flushes the session: read the ID token while it is there.
    if request is not None:
        request.oidc_end_session = end_session_url(request)


user_logged_out.connect(_on_logout, dispatch_uid="directory.oidc.end_session")


class EndSessionMiddleware:
    """A logout whose session came from the provider goes on to the provider's own logout,
    so that the next "Sign in with" asks for the password again."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        url = getattr(request, "oidc_end_session", None)
        if url and response.status_code in (301, 302, 303):
            return HttpResponseRedirect(url)
        return response
