"""The provider's claims: each user's name, e-mail, department and groups come from the
state file the tests write (``state.json``: ``people``), read at each token, so that a test
moves a user between groups as an admin would in the directory. ``fault`` in the same
file makes the next ID tokens wrong in one way, as a misbehaving or hostile provider's
would be: the portal must refuse them. ``disabled`` users' refresh tokens are refused.
"""

import json
import time
from base64 import urlsafe_b64decode

from django.conf import settings
from jwcrypto import jwk, jwt
from oauth2_provider.oauth2_validators import OAuth2Validator


def state() -> dict:
    return json.loads((settings.FOLDER / "state.json").read_text())


def _claims_of(token: str) -> dict:
    part = token.split(".")[1]
    return json.loads(urlsafe_b64decode(part + "=" * (-len(part) % 4)))


class Validator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "groups",
                        "department": "profile"}  # fmt: skip

    def get_additional_claims(self, request):
        person = state()["people"].get(request.user.username, {})
        return {
            "preferred_username": request.user.username,
            "given_name": person.get("given_name", ""),
            "family_name": person.get("family_name", ""),
            "email": person.get("email", ""),
            "department": person.get("department", ""),
            "groups": person.get("groups", []),
        }

    def validate_refresh_token(self, refresh_token, client, request, *args, **kwargs):
        # A user disabled here (``disabled`` in the state file) has their refresh tokens
        # refused, as Keycloak does for a disabled user.
        valid = super().validate_refresh_token(refresh_token, client, request, *args, **kwargs)
        return valid and request.user.username not in state().get("disabled", [])

    def finalize_id_token(self, id_token, token, token_handler, request):
        signed = super().finalize_id_token(id_token, token, token_handler, request)
        fault = state().get("fault")
        if not fault:
            return signed
        claims = _claims_of(signed)
        header = json.loads(urlsafe_b64decode(signed.split(".")[0] + "=="))
        key = request.client.jwk_key
        now = int(time.time())
        if fault == "issuer":
            claims["iss"] = "http://127.0.0.1:9/not-the-issuer"
        elif fault == "expired":
            claims["iat"], claims["exp"] = now - 1200, now - 600
        elif fault == "nonce":
            claims["nonce"] = "a-nonce-of-another-sign-in"
        elif fault == "audience":
            claims["aud"] = "another-client"
        elif fault == "signature":
            # Signed by a key that is not in this provider's JWKS, under its key's id.
            key = jwk.JWK.generate(kty="RSA", size=2048)
        token = jwt.JWT(header=json.dumps(header), claims=json.dumps(claims))
        token.make_signed_token(key)
        return token.serialize()
