"""``GET /api/v1/gpu-requests/<id>/?wait=N``: answered as soon as the request stops waiting,
or with its current state when the time is up; a bad value is a 400 (docs/api.md)."""

from __future__ import annotations

import threading
import time

import pytest
import redis
from django.conf import settings

from quotas.requests.notices import tenant_group
from quotas.requests.services import create_request
from tests import clients, procs
from tests.api import error_fields
from tests.factories import gpu_team
from tests.live_api import call, token

URL = "/api/v1/gpu-requests/"


def pending_request(team):
    return create_request(
        team.dev, tenant=team.tenant, pool=team.pool, count=1, compute_pct=25,
        memory_mib=8192, duration_hours=4, reason="ci job",
    )  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize("wait", ["-1", "61", "3600", "soon", "1.5"])
def test_a_wait_out_of_bounds_or_not_a_whole_number_is_400(wait):
    team = gpu_team("vision")
    req = pending_request(team)
    response = clients.api(team.dev).get(f"{URL}{req.pk}/", {"wait": wait})
    assert response.status_code == 400
    assert "wait" in error_fields(response)


@pytest.mark.django_db
def test_a_wait_that_runs_out_answers_the_current_state():
    team = gpu_team("vision")
    req = pending_request(team)
    response = clients.api(team.dev).get(f"{URL}{req.pk}/", {"wait": 1})
    assert response.status_code == 200
    assert response.json()["state"] == "pending"


@pytest.mark.django_db
def test_a_wait_on_another_tenants_request_is_404_at_once():
    team, other = gpu_team("vision"), gpu_team("speech")
    req = pending_request(team)
    assert clients.api(other.dev).get(f"{URL}{req.pk}/", {"wait": 60}).status_code == 404


def _group_members(tenant_id: int) -> int:
    prefix = settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"]
    store = redis.Redis.from_url(settings.REDIS_URL)
    return store.zcard(f"{prefix}:group:{tenant_group(tenant_id)}")


@pytest.mark.django_db(transaction=True)
def test_a_waiting_client_is_answered_when_an_approver_approves(child_env_for_test_db):
    team = gpu_team("vision")
    req = pending_request(team)
    dev, approver = token(team.dev), token(team.approver)
    answer: list = []
    # The approval's push comes from the notices' task in a worker, as in production.
    with procs.celery_worker(child_env_for_test_db, "wait"), \
            procs.daphne(child_env_for_test_db) as (url, _proc):  # fmt: skip
        # The wait is 60 s and the client gives up after 45: only a wake-up answers in time.
        waiter = threading.Thread(
            target=lambda: answer.append(
                call(url, "GET", f"{URL}{req.pk}/?wait=60", dev, timeout=45)
            )
        )
        waiter.start()
        deadline = time.monotonic() + 30
        while _group_members(team.tenant.pk) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # until the waiter listens, so the push is what wakes it
        approved = call(url, "POST", f"{URL}{req.pk}/approve/", approver, {"comment": "ok"})
        assert approved.status == 200, approved.body
        waiter.join(timeout=50)
    [got] = answer
    assert got.status == 200
    assert got.body["state"] == "allocated" and len(got.body["allocations"]) == 1
    assert _group_members(team.tenant.pk) == 0  # the waiter left the group
