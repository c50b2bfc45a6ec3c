"""PostgreSQL or Redis not answering: 503 with Retry-After (JSON under /api/, the portal's
page elsewhere) and a readiness check that names the store (issue #27: every call was a
500 and /healthz stayed 200 through a Redis outage)."""

from __future__ import annotations

import pytest
from django.db import connection

from portal import redis_client
from tests import clients, procs
from tests.factories import GPUFactory
from tokens.services import create_token


def test_ready_while_both_stores_answer(db, client):
    answer = client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


@pytest.fixture
def redis_down(settings, monkeypatch):
    """Every Redis user of this process pointed at a port nobody listens on."""
    dead = f"redis://127.0.0.1:{procs.free_port()}/0"
    settings.REDIS_URL = dead
    settings.CACHES = {
        **settings.CACHES,
        "default": {**settings.CACHES["default"], "LOCATION": dead},
    }
    monkeypatch.setattr(redis_client, "_client", None)


@pytest.mark.django_db
def test_redis_down_is_a_503_for_the_api_the_pages_and_readiness(alice, redis_down):
    _token, key = create_token(alice, name="ci")
    api = clients.bearer(key).get("/api/v1/nodes/")  # the token's check reads the cache
    assert api.status_code == 503 and api.headers["Retry-After"] == "5"
    assert api.json()["error"]["code"] == "unavailable"
    GPUFactory()
    page = clients.page(alice).get("/")  # the fleet's latest readings live in Redis
    assert page.status_code == 503 and page.headers["Retry-After"] == "5"
    assert 'data-status="503"' in page.content.decode()
    ready = clients.page().get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["database"] == "ok"
    assert ready.json()["checks"]["redis"] == "ConnectionError"


def test_the_database_down_is_a_503_and_not_ready(client, django_db_blocker):
    with django_db_blocker.unblock():
        connection.close()
        saved = connection.settings_dict["PORT"]
        connection.settings_dict["PORT"] = str(procs.free_port())
        try:
            health = client.get("/healthz")
            ready = client.get("/readyz")
        finally:
            connection.close()
            connection.settings_dict["PORT"] = saved
    assert health.status_code == 503 and health.headers["Retry-After"] == "5"
    assert ready.status_code == 503
    assert ready.json()["checks"] == {"database": "OperationalError", "redis": "ok"}
