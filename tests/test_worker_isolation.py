"""Each pytest-xdist worker on its own: its own test database (pytest-django's
``test_<name>_gwN``) and Redis database (tests/conftest.py), and every Redis user of this
process and of the ones it starts pointed at that one."""

from __future__ import annotations

import os

import pytest
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import connection

from portal import redis_client
from portal.celery import app as celery_app
from tests import procs
from tests.conftest import _worker_redis_url

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _db(url: str) -> str:
    return url.rsplit("/", 1)[1]


def test_a_worker_adds_its_index_to_the_redis_database(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert _worker_redis_url("redis://127.0.0.1:6379/3") == "redis://127.0.0.1:6379/3"
    for worker, db in (("gw0", 3), ("gw2", 5)):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        assert _worker_redis_url("redis://127.0.0.1:6379/3") == f"redis://127.0.0.1:6379/{db}"
    assert _worker_redis_url(None) is None
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw13")
    with pytest.raises(pytest.UsageError):
        _worker_redis_url("redis://127.0.0.1:6379/3")


def test_every_redis_user_points_at_the_workers_database():
    url = settings.REDIS_URL
    assert os.environ["REDIS_URL"] == url  # what the processes the tests start inherit
    assert redis_client.client().connection_pool.connection_kwargs["db"] == int(_db(url))
    assert cache._cache._servers == [url]
    assert get_channel_layer().hosts[0]["address"] == url
    assert celery_app.conf.broker_url == celery_app.conf.result_backend == url


@pytest.mark.django_db
def test_the_database_is_the_workers_own():
    name = connection.settings_dict["NAME"]
    assert name.startswith("test_")
    assert name.endswith(f"_{WORKER}") if WORKER else "_gw" not in name
    assert procs.database_url(connection.settings_dict).endswith(f"/{name}")
