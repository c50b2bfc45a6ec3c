"""``GET /api/v1/gpu-requests/<id>/?wait=N``: answered as soon as the request stops waiting,
or with its current state when the time is up; a bad value is a 400 (docs/api.md)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from quotas.choices import RequestState
from quotas.requests.api import wait
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


# --- a waiter and the live sockets of its process -----------------------------------------


async def _until(check, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("first", ["socket", "waiter"])
def test_a_waiter_and_a_live_socket_of_one_process_each_hear_their_push(monkeypatch, first):
    """channels_redis reads every channel of a process through one receive lock, each
    receiver popping its channel's Redis key while it holds the lock. The waiter's channel
    had a prefix of its own ("wait."), hence a second key: a live socket that held the lock
    kept the waiter's push unread until the waiter's recheck, and a waiter that held it
    kept the sockets' pushes unread as long (tests/test_scale_out_kills.py: with a
    socket's pages moved to the survivor, its waiters were answered 3-5 s after their
    request was placed). Here only a push can wake either one in time."""
    monkeypatch.setattr(wait, "RECHECK_SECONDS", 600.0)
    reads: list[int] = []

    def read(request_id: int) -> str:
        reads.append(request_id)
        return RequestState.PENDING if len(reads) == 1 else RequestState.ALLOCATED

    async def run() -> None:
        layer = get_channel_layer()
        socket = await layer.new_channel()  # a consumer's, as Channels names it
        await layer.group_add("wait-test", socket)

        def popping() -> bool:  # a receiver holds the lock: it is popping its key now
            lock = getattr(layer, "receive_lock", None)
            return bool(lock and lock.locked())

        page = waiter = None
        try:
            if first == "socket":
                page = asyncio.ensure_future(layer.receive(socket))
                await _until(popping, "the socket does not receive")
            waiter = asyncio.ensure_future(wait._wait(layer, 7, 3, 60, read))
            await _until(lambda: reads, "the waiter does not listen")
            if first == "waiter":
                await _until(popping, "the waiter does not receive")
                page = asyncio.ensure_future(layer.receive(socket))
                await layer.group_send("wait-test", {"type": "fleet.nodes", "text": "{}"})
                done, _ = await asyncio.wait({page}, timeout=30)
                assert done, "the socket behind a waiting waiter never heard its push"
            await layer.group_send(
                tenant_group(3), {"type": "request.event", "text": '{"request": 7}'}
            )
            done, _ = await asyncio.wait({waiter}, timeout=30)
            assert done, "the waiter never heard its push"
            assert reads == [7, 7]
        finally:
            for task in (page, waiter):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in (page, waiter) if t), return_exceptions=True)
            await layer.group_discard("wait-test", socket)

    async_to_sync(run)()
