"""Idempotency-Key on the API's POSTs: a retried POST creates nothing twice, also when the
retries race each other against a live server on PostgreSQL (docs/api.md)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal import idempotency
from portal.models import IdempotencyRecord
from quotas.models import GpuRequest
from tests import clients, procs
from tests.api import error_fields
from tests.factories import gpu_team
from tests.live_api import call, token

URL = "/api/v1/gpu-requests/"


def ask(team, **changes) -> dict:
    data = {"tenant": team.tenant.pk, "pool": team.pool.pk, "count": 1, "compute_pct": 25,
            "memory_mib": 8192, "duration_hours": 4, "reason": "ci job"}  # fmt: skip
    return {**data, **changes}


def post(user, data: dict, key: str | None):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return clients.api(user).post(URL, data, format="json", **headers)


@pytest.fixture
def team(db):
    return gpu_team("vision")


def test_a_retry_with_the_same_key_replays_the_answer_and_creates_nothing(team):
    first = post(team.dev, ask(team), "job-4711")
    assert first.status_code == 201, first.content
    assert "Idempotent-Replayed" not in first
    # The same body with its keys in another order is the same request.
    retry = post(team.dev, dict(reversed(ask(team).items())), "job-4711")
    assert retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.json() == first.json()
    assert GpuRequest.objects.count() == 1


def test_the_same_key_with_another_body_is_422_and_creates_nothing(team):
    assert post(team.dev, ask(team), "job-1").status_code == 201
    response = post(team.dev, ask(team, compute_pct=50), "job-1")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert GpuRequest.objects.count() == 1


def test_keys_belong_to_their_caller(team):
    assert post(team.dev, ask(team), "shared-key").status_code == 201
    other = post(team.approver, ask(team), "shared-key")
    assert other.status_code == 201 and "Idempotent-Replayed" not in other
    assert GpuRequest.objects.count() == 2


@pytest.mark.parametrize("key", ["", "   ", "k" * 256])
def test_an_empty_or_overlong_key_is_400_and_creates_nothing(team, key):
    response = post(team.dev, ask(team), key)
    assert response.status_code == 400
    assert idempotency.HEADER in error_fields(response)
    assert not GpuRequest.objects.exists() and not IdempotencyRecord.objects.exists()


def test_a_refused_request_keeps_nothing_of_its_key(team):
    refused = post(team.dev, ask(team, compute_pct=0), "job-2")
    assert refused.status_code == 400
    assert not IdempotencyRecord.objects.exists()
    # Corrected, the same key runs: only a success is replayed.
    assert post(team.dev, ask(team), "job-2").status_code == 201
    assert GpuRequest.objects.count() == 1


def test_a_key_is_kept_for_its_hours_then_pruned_and_free_again(team, settings):
    settings.IDEMPOTENCY_KEY_HOURS = 24
    assert post(team.dev, ask(team), "job-3").status_code == 201
    IdempotencyRecord.objects.update(created=timezone.now() - timedelta(hours=25))
    # Expired but not yet pruned: the key starts afresh.
    again = post(team.dev, ask(team, compute_pct=50), "job-3")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again
    assert GpuRequest.objects.count() == 2
    IdempotencyRecord.objects.update(created=timezone.now() - timedelta(hours=25))
    assert idempotency.prune() == 1
    assert not IdempotencyRecord.objects.exists()


def test_other_posts_of_the_view_take_a_key_too(team):
    created = post(team.dev, ask(team), None).json()
    path = f"{URL}{created['id']}/release/"
    client = clients.api(team.dev)
    first = client.post(path, HTTP_IDEMPOTENCY_KEY="release-1")
    retry = client.post(path, HTTP_IDEMPOTENCY_KEY="release-1")
    assert first.status_code == retry.status_code == 200
    assert retry["Idempotent-Replayed"] == "true"
    # Without the key the second release is refused: the request is no longer open.
    assert client.post(path).status_code == 400


def test_the_claims_row_takes_the_answer_without_being_read_again(team):
    with CaptureQueriesContext(connection) as queries:
        assert post(team.dev, ask(team), "job-5").status_code == 201
    on_records = [q["sql"] for q in queries if '"portal_idempotencyrecord"' in q["sql"]]
    # One INSERT ... ON CONFLICT DO NOTHING claims the key, then the answer: no look-up.
    assert [sql.split()[0] for sql in on_records] == ["INSERT", "UPDATE"], on_records
    assert IdempotencyRecord.objects.get().status_code == 201


def test_the_schema_documents_the_header_and_its_errors(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    # The actions too: the schema names their path parameter {id}, the routes {pk}.
    for path in (URL, f"{URL}{{id}}/release/", f"{URL}{{id}}/approve/"):
        operation = schema["paths"][path]["post"]
        assert idempotency.HEADER in [p["name"] for p in operation["parameters"]], path
        assert {"409", "422"} <= set(operation["responses"]), path


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_against_a_live_server_create_exactly_one_request(
    child_env_for_test_db,
):
    team = gpu_team("vision")
    auth, data = token(team.dev), ask(team)
    retries = 8
    start = threading.Barrier(retries)
    answers: list = [None] * retries

    def retry(i: int) -> None:
        start.wait()
        answers[i] = call(url, "POST", URL, auth, data, {"Idempotency-Key": "ci-run-99"})

    with procs.daphne(child_env_for_test_db) as (url, _proc):
        threads = [threading.Thread(target=retry, args=(i,)) for i in range(retries)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert [a.status for a in answers] == [201] * retries, [a.body for a in answers]
    assert len({a.body["id"] for a in answers}) == 1
    replayed = [a.headers.get("idempotent-replayed") == "true" for a in answers]
    assert replayed.count(False) == 1
    assert GpuRequest.objects.count() == 1
