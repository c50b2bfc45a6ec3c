"""A request the portal refuses (4xx) is one line in the log, not a traceback; a server
error keeps its traceback."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings
from django.urls import path

from tests import clients
from tests.factories import gpu_team


def _boom(request):
    raise RuntimeError("a real bug")


urlpatterns = [path("boom/", _boom)]


def _request_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django.request"]


@pytest.mark.django_db
def test_a_refused_page_is_logged_without_a_traceback(caplog):
    team = gpu_team("vision")
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert clients.page(team.dev).get("/approvals/").status_code == 403
    [record] = _request_records(caplog)
    assert record.status_code == 403 and "Forbidden" in record.getMessage()
    assert record.exc_info is None and "Traceback" not in caplog.text


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_a_server_error_keeps_its_traceback(caplog, client):
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        assert client.get("/boom/").status_code == 500
    [record] = _request_records(caplog)
    assert record.exc_info is not None and "a real bug" in caplog.text
