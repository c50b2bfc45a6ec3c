"""Every API error in one shape, {"error": {"code", "message", "fields"}}, and the schema
says so (docs/api.md, "Errors")."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.test import RequestFactory

from portal import api_errors
from tests import clients

pytestmark = pytest.mark.django_db


def error(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content
    return response.json()["error"]


def test_a_missing_token_is_401_with_its_challenge_and_code():
    response = clients.api().get("/api/v1/nodes/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert error(response)["code"] == "not_authenticated"
    assert "fields" not in error(response)


def test_invalid_input_names_each_field_and_speaks_the_callers_language(bob):
    response = clients.api(bob).post(
        "/api/v1/gpu-requests/", {}, format="json", HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    assert response.status_code == 400
    body = error(response)
    assert body["code"] == "invalid"
    assert {"tenant", "pool", "reason"} <= set(body["fields"])
    assert body["message"] != "Invalid input."  # translated


def test_malformed_json_is_a_parse_error(bob):
    response = clients.api(bob).generic(
        "POST", "/api/v1/gpu-requests/", "{bad", content_type="application/json"
    )
    assert response.status_code == 400 and error(response)["code"] == "parse_error"


def test_a_method_the_path_does_not_take_is_405(bob):
    response = clients.api(bob).delete("/api/v1/gpu-requests/")
    assert response.status_code == 405 and error(response)["code"] == "method_not_allowed"


def test_refused_and_absent_objects_have_their_codes(bob):
    assert error(clients.api(bob).post("/api/v1/pools/", {}, format="json"))["code"] == (
        "permission_denied"
    )
    response = clients.api(bob).get("/api/v1/gpu-requests/999999999/")
    assert response.status_code == 404
    assert error(response) == {"code": "not_found", "message": "Not found."}


def test_an_unknown_path_under_api_is_json_and_elsewhere_a_page(client):
    response = client.get("/api/v1/no-such-thing/")
    assert response.status_code == 404 and error(response)["code"] == "not_found"
    page = client.get("/no-such-page/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_a_crash_under_api_is_answered_in_the_error_shape():
    factory = RequestFactory()
    response = api_errors.server_error(factory.get("/api/v1/nodes/"))
    assert response.status_code == 500
    assert json.loads(response.content)["error"]["code"] == "server_error"
    assert api_errors.server_error(factory.get("/fleet/"))["Content-Type"].startswith("text/html")


def test_a_bare_list_of_errors_belongs_to_the_input_as_a_whole():
    assert api_errors.field_errors(["Over quota."]) == {"non_field_errors": ["Over quota."]}
    assert api_errors.field_errors({"__all__": ["x"], "name": ["y"]}) == {
        "non_field_errors": ["x"], "name": ["y"],
    }  # fmt: skip


def test_a_services_validation_error_raised_in_a_view_is_a_400_naming_its_fields(bob):
    # reports.accounting.parse_month raises Django's ValidationError; the view leaves it to
    # the handler, and nothing else turns it into DRF's.
    response = clients.api(bob).get("/api/v1/accounting/", {"month": "2026-13"})
    assert response.status_code == 400
    assert error(response) == {
        "code": "invalid", "message": "Invalid input.",
        "fields": {"month": ["Give a month as YYYY-MM."]},
    }  # fmt: skip


def _handled(exc: Exception) -> tuple[int, dict]:
    response = api_errors.exception_handler(exc, {})
    return response.status_code, response.data["error"]


def test_a_validation_error_for_the_object_as_a_whole_is_the_inputs():
    status, body = _handled(ValidationError({"__all__": ["Overlaps."], "name": ["Taken."]}))
    assert status == 400 and body["code"] == "invalid"
    assert body["fields"] == {"non_field_errors": ["Overlaps."], "name": ["Taken."]}


def test_a_validation_error_without_fields_is_a_400_that_says_it():
    status, body = _handled(ValidationError("This request has already ended."))
    assert status == 400
    assert body == {
        "code": "invalid", "message": "This request has already ended.",
        "fields": {"non_field_errors": ["This request has already ended."]},
    }  # fmt: skip
    status, body = _handled(ValidationError(["One.", "Two."]))
    assert status == 400 and body["message"] == "Invalid input."
    assert body["fields"] == {"non_field_errors": ["One.", "Two."]}


def test_the_schema_documents_the_error_shape_on_every_operation(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    component = schema["components"]["schemas"]["Error"]
    codes = component["properties"]["error"]["properties"]["code"]["enum"]
    assert set(api_errors.CODES) == set(codes)
    missing = [
        (path, method, status)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        for status in ("400", "401", "403", "404", "429")
        if status not in operation["responses"]
    ]
    assert missing == []
    create = schema["paths"]["/api/v1/gpu-requests/"]["post"]
    assert create["requestBody"]["content"]["application/json"]["examples"]
    read = schema["paths"]["/api/v1/allocations/{id}/"]["get"]
    assert read["responses"]["200"]["content"]["application/json"]["examples"]
