"""Odd but well-formed query values: an answer or a 400 naming the parameter, never a 500
(issue #27's cases, each once a 500 on the production stack)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit import interface as audit
from tests import clients
from tests.api import error_fields
from tests.factories import EventFactory, GPUFactory

pytestmark = pytest.mark.django_db

STARTED = datetime(2026, 12, 12, 12, 0, tzinfo=UTC)


@pytest.fixture
def admin(alice):
    return clients.api(alice)


@pytest.mark.parametrize(
    ("params", "found"),
    [
        # 04:00 at -16:00 is 20:00 UTC, after the start; +16:00 puts 20:00 at 04:00 UTC.
        ({"since": "2026-12-12T04:00:00-16:00"}, False),
        ({"until": "2026-12-12T04:00:00-16:00"}, True),
        ({"since": "2026-12-13T03:59:00+16:00"}, True),
        ({"until": "2026-12-12T20:00:00+23:59"}, False),
    ],
)
def test_event_times_take_any_iso_offset(admin, params, found):
    event = EventFactory(started_at=STARTED)
    response = admin.get("/api/v1/alert-events/", params)
    assert response.status_code == 200, response.content
    ids = [row["id"] for row in response.json()["results"]]
    assert ids == ([event.pk] if found else [])


def test_audit_times_take_any_iso_offset(admin, alice):
    audit.record("node.drained", actor=alice, target_type="agents.node", target_id="1")
    response = admin.get("/api/v1/audit/", {"after": "2000-01-01T00:00:00+20:00"})
    assert response.status_code == 200, response.content
    assert response.json()["count"] >= 1


@pytest.mark.parametrize("url", ["/api/v1/tokens/", "/api/v1/gpus/", "/api/v1/gpu-requests/"])
@pytest.mark.parametrize("name", ["limit", "offset"])
def test_a_page_past_bigint_is_a_400_naming_it(admin, url, name):
    GPUFactory()  # rows to page through: the 500 needed one
    response = admin.get(url, {name: str(2**63)})
    assert response.status_code == 400
    assert list(error_fields(response)) == [name]


def test_the_largest_offset_is_an_empty_page(admin):
    GPUFactory()
    response = admin.get("/api/v1/gpus/", {"offset": str(2**63 - 1)})
    assert response.status_code == 200 and response.json()["results"] == []


def test_the_api_root_asks_a_stranger_to_sign_in_and_shows_a_member_the_docs(member_user):
    anonymous = clients.api(None).get("/api/v1/")
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"]
    answer = clients.api(member_user).get("/api/v1/")
    assert answer.status_code == 200
    assert answer.json()["schema"].endswith("/api/schema/")
