"""What the API documentation tells its readers about each token and service-account
operation (docstrings stay developer notes; these replace them in the schema)."""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample

TOKEN_OPERATIONS: dict[str, Promise] = {
    "list": _(
        "Your own API tokens, newest first: name, scope, expiry, when and from where each "
        "was last used, and whether it was revoked. Keys are never listed, only their hint."
    ),
    "retrieve": _("One of your API tokens, as in the list."),
    "create": _(
        "Make an API token for yourself. The answer carries its key, once: copy it then, it "
        "cannot be read again. A token cannot make a token with a wider scope or a later "
        "expiry than its own, and a read token makes none. Service accounts cannot make "
        "tokens: their tenant's admins do. A 400 answer names each field that is wrong."
    ),
    "destroy": _(
        "Revoke one of your tokens: it stops working at once. It stays in the list with "
        "the moment it was revoked."
    ),
}

SERVICE_ACCOUNT_OPERATIONS: dict[str, Promise] = {
    "list": _(
        "The service accounts of your tenants (every tenant's for platform admins): "
        "accounts for CI jobs, members of their tenant that authenticate only with tokens."
    ),
    "retrieve": _("One service account, as in the list."),
    "create": _(
        "Make a service account in a tenant (its admins and platform admins). It becomes a "
        "member of the tenant and has no token until one is issued for it."
    ),
    "destroy": _(
        "Disable a service account for good (its tenant's admins and platform admins): its "
        "tokens are revoked and it can no longer authenticate. It stays listed, disabled."
    ),
    "tokens": _(
        "GET: the service account's tokens. POST: issue one; the answer carries its key, "
        "once. Its tenant's admins and platform admins only."
    ),
    "revoke_token": _(
        "Revoke one of the service account's tokens (its tenant's admins and platform admins)."
    ),
}

# Bodies a caller can send as they are: a CI engineer's starting point, and schemathesis'
# valid creates for its stateful phase (tenant 1: the other examples' tenant).
TOKEN_EXAMPLES = [
    OpenApiExample("A write token for a CI runner, for six months", request_only=True,
                   value={"name": "ci-runner-3", "scope": "write",
                          "expires_at": "2027-06-30T00:00:00Z"}),
]  # fmt: skip

SERVICE_ACCOUNT_EXAMPLES = [
    OpenApiExample("The tenant's CI", request_only=True,
                   value={"tenant": 1, "name": "ci-nightly",
                          "description": "Nightly integration tests on GitLab CI."}),
]  # fmt: skip
