"""The requests socket: one's own events and those of the tenants one approves for,
never another tenant's; through the ASGI application with its origin gate."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from portal.asgi import application
from quotas.requests.services import create_request, decide
from tests import clients
from tests.factories import gpu_team

# A step's pushes go out from the notices' task, run here as it is sent.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]


def _headers(user=None, origin: bytes = b"http://localhost") -> list[tuple[bytes, bytes]]:
    headers = [(b"origin", origin), (b"host", b"localhost")]
    if user is not None:
        headers.append(clients.cookie_header(user))
    return headers


def listen(users_and_origins, act) -> list[tuple[bool, list[dict]]]:
    """Connect each user, run ``act`` (sync, off the event loop), and collect what each
    socket got within a moment."""

    headers = [_headers(user, origin) for user, origin in users_and_origins]

    async def run():
        sockets = []
        for each in headers:
            communicator = WebsocketCommunicator(application, "/ws/requests/", headers=each)
            connected, _ = await communicator.connect(timeout=5)
            sockets.append((communicator, connected))
        from asgiref.sync import sync_to_async

        await sync_to_async(act)()
        results = []
        for communicator, connected in sockets:
            got = []
            if connected:
                while not await communicator.receive_nothing(timeout=0.5):
                    got.append(json.loads(await communicator.receive_from()))
                await communicator.disconnect()
            results.append((connected, got))
        return results

    return async_to_sync(run)()


def test_the_requester_and_the_tenants_approvers_hear_a_step_and_no_other_tenant_does(alice):
    team, other = gpu_team("vision"), gpu_team("speech")
    done = {}

    def act():
        done["req"] = create_request(team.dev, **team.ask())

    users = [team.dev, team.approver, team.admin, other.dev, other.approver, other.admin, alice]
    results = listen([(u, b"http://localhost") for u in users], act)
    heard = [[e["request"] for e in got if "request" in e] for _, got in results]
    req_id = done["req"].pk
    assert all(connected for connected, _ in results)
    assert heard[0] == [req_id] and heard[1] == [req_id] and heard[2] == [req_id]
    assert heard[3] == heard[4] == heard[5] == []
    assert heard[6] == [req_id]  # platform admin


def test_a_member_hears_only_their_own_requests_not_their_teammates(alice):
    team = gpu_team("vision")

    def act():
        req = create_request(team.admin, **team.ask())
        decide(req.pk, team.approver, approve=False)

    [(connected, got)] = listen([(team.dev, b"http://localhost")], act)
    assert connected and got == []


def test_anonymous_and_foreign_origin_sockets_are_refused():
    team = gpu_team("vision")
    results = listen(
        [(None, b"http://localhost"), (team.dev, b"http://evil.example")], lambda: None
    )
    assert [connected for connected, _ in results] == [False, False]
