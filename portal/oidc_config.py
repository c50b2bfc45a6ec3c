"""Sign-in through an OpenID Connect identity provider (Keycloak, Entra ID, ...), read from
the environment: mozilla-django-oidc's ``OIDC_*`` settings plus the portal's own. With no
``OIDC_ISSUER`` there are none and nothing imports mozilla-django-oidc (the ``oidc`` extra).

The provider's endpoints are not settings: they come from its discovery document
(``directory.oidc.discovery``), fetched at the first sign-in, not at start-up, so the
portal starts while the provider is away. A malformed value fails at start-up with the
variable's name, as ``portal.env`` does.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_float, env_int, env_str

SIGN_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")


def oidc_settings() -> dict[str, Any]:
    """The settings to add for the identity provider, or {} when OIDC_ISSUER is not set."""
    issuer = env_str("OIDC_ISSUER").rstrip("/")
    if not issuer:
        return {}
    try:
        import mozilla_django_oidc  # noqa: F401
    except ImportError:
        raise ImproperlyConfigured(
            "OIDC_ISSUER is set but mozilla-django-oidc is not installed: "
            "pip install 'gpu-portal[oidc]'."
        ) from None
    if urlsplit(issuer).scheme not in {"https", "http"}:
        raise ImproperlyConfigured(f"OIDC_ISSUER must be an https:// URL, not {issuer!r}")
    client_id, secret = env_str("OIDC_CLIENT_ID"), env_str("OIDC_CLIENT_SECRET")
    if not client_id or not secret:
        raise ImproperlyConfigured(
            "OIDC_CLIENT_ID and OIDC_CLIENT_SECRET must be set with OIDC_ISSUER"
        )
    scopes = env_str("OIDC_SCOPES", "openid profile email")
    if "openid" not in scopes.split():
        raise ImproperlyConfigured(f"OIDC_SCOPES must include openid, not {scopes!r}")
    algorithm = env_str("OIDC_SIGN_ALGO", "RS256")
    if algorithm not in SIGN_ALGORITHMS:
        raise ImproperlyConfigured(
            f"OIDC_SIGN_ALGO must be one of {', '.join(SIGN_ALGORITHMS)}, not {algorithm!r}"
        )
    parts = urlsplit(issuer)
    host = parts.hostname or issuer
    ca_file = env_str("OIDC_CA_FILE")
    return {
        "OIDC_ISSUER": issuer,
        "OIDC_ISSUER_ORIGIN": f"{parts.scheme}://{parts.netloc}",
        "OIDC_DISCOVERY_URL": env_str("OIDC_DISCOVERY_URL")
        or f"{issuer}/.well-known/openid-configuration",
        "OIDC_RP_CLIENT_ID": client_id,
        "OIDC_RP_CLIENT_SECRET": secret,
        "OIDC_RP_SCOPES": scopes,
        # Asymmetric only: with HS256 anyone holding the client secret could sign tokens.
        "OIDC_RP_SIGN_ALGO": algorithm,
        # Authorization code with PKCE (S256), a nonce and a state per sign-in.
        "OIDC_USE_PKCE": True,
        "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256",
        "OIDC_USE_NONCE": True,
        # Kept for RP-initiated logout (id_token_hint at the provider's end_session_endpoint).
        "OIDC_STORE_ID_TOKEN": True,
        "OIDC_VERIFY_SSL": ca_file or True,
        "OIDC_TIMEOUT": env_float("OIDC_TIMEOUT", 5.0, minimum=0.1),
        "OIDC_CALLBACK_CLASS": "directory.oidc.CallbackView",
        "OIDC_AUTHENTICATE_CLASS": "directory.oidc.AuthenticateView",
        "OIDC_AUTHENTICATION_CALLBACK_URL": "directory:oidc_callback",
        # The portal's own names for the claims it reads.
        "OIDC_USERNAME_CLAIM": env_str("OIDC_USERNAME_CLAIM", "preferred_username"),
        "OIDC_GROUPS_CLAIM": env_str("OIDC_GROUPS_CLAIM", "groups"),
        "OIDC_DEPARTMENT_CLAIM": env_str("OIDC_DEPARTMENT_CLAIM", "department"),
        # Clock skew allowed between the provider and the portal when reading exp and iat.
        "OIDC_LEEWAY_S": env_int("OIDC_LEEWAY_S", 30, minimum=0),
        # At an API token's use, its OpenID Connect user's refresh token is tried at the
        # provider when the last answer is older than this, in seconds; 0: never (off).
        "OIDC_TOKEN_RECHECK_S": env_int("OIDC_TOKEN_RECHECK_S", 0, minimum=0),
        "OIDC_DIRECTORY_NAME": env_str("OIDC_DIRECTORY_NAME") or f"oidc:{host}",
        # What the login page's button says: "Sign in with <this>".
        "OIDC_PROVIDER_NAME": env_str("OIDC_PROVIDER_NAME") or host,
    }
