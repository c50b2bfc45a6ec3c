"""A real OpenID Connect provider for the sign-in tests: django-oauth-toolkit's, in a Django
process of its own (tests/oidc_idp/) on a free loopback port, with a SQLite database and a
fresh RSA key in a temporary folder. Its users' passwords are in its database; their
claims (name, e-mail, department, groups) and any fault of its ID tokens are in a state
file the tests rewrite (``Provider.set``), read by the provider at each token.

Without mozilla-django-oidc or django-oauth-toolkit (the ``oidc`` and ``test`` extras) the
tests are skipped with the reason on a developer's machine; with ``CI`` set that is a failure.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import procs

CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "portal-client-secret-for-tests"
# Loopback redirect URIs match on any port (RFC 8252 7.3): the test client's and a live server's.
PORTAL_BASES = ("http://testserver", "http://127.0.0.1")
PASSWORDS = {"dana": "dana-secret", "erik": "erik-secret", "alice": "alice-idp-pw",
             "bob": "bob-idp-pw"}  # fmt: skip
PEOPLE = {
    "dana": {"given_name": "Dana", "family_name": "Li", "email": "dana@corp.example",
             "department": "Risk", "groups": ["gpu-quant-users"]},
    "erik": {"given_name": "Erik", "family_name": "Wang", "email": "erik@corp.example",
             "department": "Quant Research",
             "groups": ["gpu-quant-users", "gpu-quant-approvers", "gpu-quant-admins",
                        "portal-admins"]},
    # The same name as the suite's local superuser (tests/cast.py): never taken over.
    "alice": {"given_name": "Alice", "family_name": "Intruder", "email": "alice@evil.example",
              "department": "", "groups": ["portal-admins"]},
    # And the name of a plain local user of the suite's: not taken over either.
    "bob": {"given_name": "Bob", "family_name": "Other", "email": "bob@corp.example",
            "department": "", "groups": ["gpu-quant-admins"]},
}  # fmt: skip


@dataclass
class Provider:
    url: str
    issuer: str
    folder: Path
    proc: procs.Proc
    people: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set(
        self, people: dict[str, dict[str, Any]] | None = None, fault: str | None = None,
        disabled: list[str] | None = None,
    ) -> None:  # fmt: skip
        """What the provider says of its users from now on, how its ID tokens are wrong,
        and whose refresh tokens it refuses."""
        if people is not None:
            self.people = people
        state = {"people": self.people, "fault": fault, "disabled": disabled or []}
        temporary = self.folder / "state.json.new"
        temporary.write_text(json.dumps(state))
        temporary.replace(self.folder / "state.json")

    def reset(self) -> None:
        self.set(copy.deepcopy(PEOPLE), None)


def _rsa_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()  # fmt: skip


def start(folder: Path) -> Provider:
    try:
        import mozilla_django_oidc  # noqa: F401
        import oauth2_provider  # noqa: F401
    except ImportError:
        message = (
            "mozilla-django-oidc / django-oauth-toolkit not installed: pip install -e '.[test]'"
        )
        procs.unavailable(message)
    (folder / "rsa.pem").write_text(_rsa_pem())
    port = procs.free_port()
    url = f"http://127.0.0.1:{port}"
    issuer = f"{url}/o"
    client = {
        "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
        "redirect_uris": [f"{base}/oidc/callback/" for base in PORTAL_BASES],
        "post_logout_redirect_uris": [f"{base}/accounts/login/" for base in PORTAL_BASES],
    }  # fmt: skip
    env = procs.child_env(
        IDP_FOLDER=str(folder), IDP_ISSUER=issuer, IDP_CLIENT=json.dumps(client),
        IDP_USERS=",".join(f"{name}:{pw}" for name, pw in PASSWORDS.items()),
        DJANGO_SETTINGS_MODULE="tests.oidc_idp.settings",
    )  # fmt: skip
    provider = Provider(url, issuer, folder, None)  # type: ignore[arg-type]
    provider.reset()
    proc = procs.start("idp", [procs.PYTHON, "-m", "tests.oidc_idp.serve", str(port)], env)
    provider.proc = proc
    try:
        proc.wait_for("idp ready", timeout=120)
        procs.wait_http(f"{url}/healthz", timeout=30, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return provider


def stop(provider: Provider) -> None:
    provider.proc.stop()


@pytest.fixture(scope="session")
def idp(tmp_path_factory) -> Iterator[Provider]:
    """The provider, once per session (import it into a test module to use it)."""
    provider = start(tmp_path_factory.mktemp("idp"))
    yield provider
    stop(provider)


def environment(issuer: str, name: str) -> dict[str, str]:
    """The portal's environment for this provider, as production would set it."""
    return {
        "OIDC_ISSUER": issuer,
        "OIDC_CLIENT_ID": CLIENT_ID,
        "OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_SCOPES": "openid profile email groups",
        "OIDC_GROUPS_CLAIM": "groups",
        "OIDC_DIRECTORY_NAME": name,
        "OIDC_PROVIDER_NAME": "Corp SSO",
        "OIDC_LEEWAY_S": "5",
    }
