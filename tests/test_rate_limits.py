"""API rate limits: a budget per token, else per signed-in user, else per address; 429 with
Retry-After past it. The counts live in the cache (Redis), emptied before each test by
conftest's _clean_redis."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from portal.env import env_rate
from tests import clients
from tokens import interface
from tokens.throttling import parse_rate

pytestmark = pytest.mark.django_db

URL = "/api/v1/nodes/"


@pytest.fixture(autouse=True)
def _small_rates(settings):
    # Per day: a fixed window of a minute could end between two calls of a slow test.
    settings.API_RATE_TOKEN = "3/day"
    settings.API_RATE_USER = "2/day"
    settings.API_RATE_ANON = "2/day"
    cache.clear()  # the suite's Redis is flushed per test too; this names the dependency


def test_each_token_has_its_own_budget_and_the_excess_is_a_429_with_retry_after(bob):
    _first, first = interface.issue(bob, name="a")
    _second, second = interface.issue(bob, name="b")
    for _ in range(3):
        assert clients.bearer(first, REMOTE_ADDR="203.0.113.5").get(URL).status_code == 200
    refused = clients.bearer(first, REMOTE_ADDR="203.0.113.5").get(URL)
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 86400
    # Another token of the same user, from another address, still has its budget.
    assert clients.bearer(second, REMOTE_ADDR="198.51.100.9").get(URL).status_code == 200
    # Writes count too: a refused call changes nothing.
    assert (
        clients.bearer(first, REMOTE_ADDR="203.0.113.5")
        .post("/api/v1/tokens/", {"name": "x"})
        .status_code
        == 429
    )
    assert bob.api_tokens.count() == 2


def test_a_session_counts_per_user_whatever_the_address(bob):
    for address in ("10.0.0.1", "10.0.0.2"):
        client = APIClient(REMOTE_ADDR=address)
        client.force_login(bob)
        assert client.get(URL).status_code == 200
    client = APIClient(REMOTE_ADDR="10.0.0.3")
    client.force_login(bob)
    assert client.get(URL).status_code == 429


def test_anonymous_calls_count_per_address(client):
    for _ in range(2):
        assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/schema/").status_code == 429
    assert APIClient(REMOTE_ADDR="192.0.2.77").get("/api/schema/").status_code == 200


def test_an_empty_rate_means_no_limit(bob, settings):
    settings.API_RATE_TOKEN = ""
    _token, key = interface.issue(bob, name="a")
    assert all(
        clients.bearer(key, REMOTE_ADDR="203.0.113.5").get(URL).status_code == 200 for _ in range(5)
    )


def test_rates_are_checked_when_the_settings_are_read(monkeypatch):
    assert parse_rate("1200/min") == (1200, 60) and parse_rate("5/hour") == (5, 3600)
    monkeypatch.setenv("API_RATE_TOKEN", "lots")
    with pytest.raises(ImproperlyConfigured, match="API_RATE_TOKEN"):
        env_rate("API_RATE_TOKEN", "1200/min")
    monkeypatch.setenv("API_RATE_TOKEN", "")
    assert env_rate("API_RATE_TOKEN", "1200/min") == ""
