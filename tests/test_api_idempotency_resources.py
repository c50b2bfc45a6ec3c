"""Idempotency-Key beyond GPU requests: the other API POSTs that create or act run once per
key, token creation refuses a key (its answer holds the secret key, which an idempotency
record would keep), and the schema lists the header on exactly the POSTs that honour it
(docs/api.md, "Idempotency")."""

from __future__ import annotations

import json

import pytest

from alerts.choices import EventState
from alerts.models import Channel, Event
from pools.models import Pool
from portal import idempotency
from portal.models import IdempotencyRecord
from quotas.models import Tenant
from tests import clients
from tests.api import error_fields
from tests.factories import EventFactory, TenantFactory
from tokens.models import ApiToken, ServiceAccount

pytestmark = pytest.mark.django_db
ROBOT = "https://hooks.example.com/ci/very-secret-path-0123456789"


def post(user, url: str, data: dict | None, key: str | None):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return clients.api(user).post(url, data, format="json", **headers)


# url, model, a body, the same body changed
CREATES = {
    "pools": ("/api/v1/pools/", Pool, {"name": "training", "slug": "training"},
              {"name": "training", "slug": "training2"}),
    "tenants": ("/api/v1/tenants/", Tenant, {"name": "Zeta", "slug": "zeta", "admin": "alice"},
                {"name": "Zeta", "slug": "zeta", "admin": "alice", "description": "another"}),
    "alert-channels": ("/api/v1/alert-channels/", Channel,
                       {"name": "ci hook", "kind": "webhook", "settings": {"url": ROBOT}},
                       {"name": "ci hook 2", "kind": "webhook", "settings": {"url": ROBOT}}),
}  # fmt: skip


@pytest.mark.parametrize("resource", CREATES)
def test_a_retried_create_makes_one_and_replays_its_answer(alice, resource):
    url, model, body, _other = CREATES[resource]
    before = model.objects.count()
    first = post(alice, url, body, "ci-create-1")
    assert first.status_code == 201, first.content
    assert "Idempotent-Replayed" not in first
    retry = post(alice, url, dict(reversed(body.items())), "ci-create-1")
    assert retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.json() == first.json()
    assert model.objects.count() == before + 1


@pytest.mark.parametrize("resource", CREATES)
def test_the_same_key_with_another_body_is_422_and_makes_nothing(alice, resource):
    url, model, body, other = CREATES[resource]
    assert post(alice, url, body, "ci-create-2").status_code == 201
    before = model.objects.count()
    reused = post(alice, url, other, "ci-create-2")
    assert reused.status_code == 422
    assert reused.json()["error"]["code"] == "idempotency_key_reused"
    assert model.objects.count() == before


def test_a_stored_answer_keeps_no_channel_secret(alice):
    assert (
        post(alice, "/api/v1/alert-channels/", CREATES["alert-channels"][2], "k").status_code == 201
    )
    record = IdempotencyRecord.objects.get()
    assert ROBOT not in record.body and "very-secret" not in record.body


def test_a_retried_acknowledge_replays_instead_of_a_409(alice):
    event = EventFactory()
    url = f"/api/v1/alert-events/{event.pk}/acknowledge/"
    first = post(alice, url, None, "ack-1")
    retry = post(alice, url, None, "ack-1")
    assert first.status_code == retry.status_code == 200, first.content
    assert retry["Idempotent-Replayed"] == "true" and retry.json() == first.json()
    assert Event.objects.get(pk=event.pk).state == EventState.ACKNOWLEDGED
    # Without the key the second acknowledge is refused: the event is acknowledged already.
    assert post(alice, url, None, None).status_code == 409


def test_a_retried_service_account_create_makes_one(alice):
    tenant = TenantFactory()
    body = {"tenant": tenant.pk, "name": "ci", "description": "pipelines"}
    first = post(alice, "/api/v1/service-accounts/", body, "sa-1")
    retry = post(alice, "/api/v1/service-accounts/", body, "sa-1")
    assert first.status_code == retry.status_code == 201, first.content
    assert retry["Idempotent-Replayed"] == "true"
    assert ServiceAccount.objects.count() == 1


def test_making_a_token_with_a_key_is_refused_and_stores_nothing(alice):
    tenant = TenantFactory()
    account = post(alice, "/api/v1/service-accounts/", {"tenant": tenant.pk, "name": "ci"}, None)
    tokens_before = ApiToken.objects.count()
    for url in ("/api/v1/tokens/", f"/api/v1/service-accounts/{account.json()['id']}/tokens/"):
        refused = post(alice, url, {"name": "ci token", "scope": "write"}, "token-1")
        assert refused.status_code == 400, (url, refused.content)
        assert error_fields(refused)[idempotency.HEADER] == [str(idempotency.SECRET_ANSWER)]
        assert "gpp_" not in refused.content.decode()
    assert ApiToken.objects.count() == tokens_before
    assert not IdempotencyRecord.objects.exists()
    # Without the header a token is made as always, its key in the answer once.
    made = post(alice, "/api/v1/tokens/", {"name": "ci token", "scope": "write"}, None)
    assert made.status_code == 201 and made.json()["key"].startswith("gpp_")
    assert not IdempotencyRecord.objects.exists()


def test_making_a_user_or_a_link_with_a_key_is_refused_and_stores_nothing(alice):
    from django.contrib.auth import get_user_model

    from quotas.tenancy.api.user_views import SECRET_LINK

    users = get_user_model().objects.count()
    refused = post(alice, "/api/v1/users/", {"username": "newbie"}, "user-1")
    assert refused.status_code == 400, refused.content
    assert error_fields(refused)[idempotency.HEADER] == [str(SECRET_LINK)]
    assert get_user_model().objects.count() == users
    made = post(alice, "/api/v1/users/", {"username": "newbie"}, None)
    assert made.status_code == 201 and "/accounts/set-password/" in made.json()["password_link"]
    link = post(alice, f"/api/v1/users/{made.json()['id']}/password-link/", None, "link-1")
    assert link.status_code == 400 and "/accounts/set-password/" not in link.content.decode()
    assert not IdempotencyRecord.objects.exists()


# Every POST of the API that runs once per key; the rest take no key (tokens refuse one).
HONOURED = {
    "/api/v1/alert-channels/", "/api/v1/alert-channels/{id}/test/",
    "/api/v1/alert-events/{id}/acknowledge/", "/api/v1/alert-events/{id}/resolve/",
    "/api/v1/alert-rules/", "/api/v1/alert-subscriptions/",
    "/api/v1/clusters/", "/api/v1/clusters/{id}/namespaces/",
    "/api/v1/clusters/{cluster_ref}/jobs/",
    "/api/v1/gpu-requests/", "/api/v1/gpu-requests/{id}/approve/",
    "/api/v1/gpu-requests/{id}/approve-extension/", "/api/v1/gpu-requests/{id}/extend/",
    "/api/v1/gpu-requests/{id}/reject/", "/api/v1/gpu-requests/{id}/reject-extension/",
    "/api/v1/gpu-requests/{id}/release/", "/api/v1/gpu-requests/{id}/resize/",
    "/api/v1/memberships/", "/api/v1/quotas/", "/api/v1/tenants/",
    "/api/v1/nodes/", "/api/v1/nodes/import/", "/api/v1/nodes/test-connection/",
    "/api/v1/pools/", "/api/v1/pools/{id}/cards/add/", "/api/v1/pools/{id}/cards/remove/",
    "/api/v1/pool-cards/{id}/clear-cordon/",
    "/api/v1/reclaim-exemptions/", "/api/v1/reclaim-warnings/{id}/appeal/",
    "/api/v1/reclaim-warnings/{id}/decide/",
    "/api/v1/service-accounts/",
    "/api/v1/users/{id}/deactivate/", "/api/v1/users/{id}/reactivate/",
}  # fmt: skip
WITHOUT = {
    "/api/v1/tokens/", "/api/v1/service-accounts/{id}/tokens/",  # refused: the key's secret
    "/api/v1/users/", "/api/v1/users/{id}/password-link/",  # refused: the link's secret
    "/api/v1/alertmanager/",  # no user to own a key
    "/api/v1/pool-nodes/{id}/drain/",  # idempotent itself; each move commits alone
}  # fmt: skip


def test_the_schema_lists_the_header_on_exactly_the_posts_that_honour_it(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    posts = {path: ops["post"] for path, ops in schema["paths"].items() if "post" in ops}
    with_header = {
        path for path, op in posts.items()
        if idempotency.HEADER in [p["name"] for p in op.get("parameters", [])]
    }  # fmt: skip
    assert with_header == HONOURED
    assert set(posts) == HONOURED | WITHOUT
    for path in with_header:
        assert {"409", "422"} <= set(posts[path]["responses"]), path
    # The views' mixin documents nothing of itself.
    assert "idempotency_refused" not in json.dumps(schema)
