"""Who the API lets in: 401 with a challenge for no or bad credentials, 403 for no right."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.models import Node
from tests import clients
from tokens.interface import issue

pytestmark = pytest.mark.django_db

URLS = ["/api/v1/nodes/", "/api/v1/gpus/"]


@pytest.mark.parametrize("url", URLS)
def test_an_anonymous_caller_is_asked_to_authenticate(url):
    response = clients.api().get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("url", URLS)
def test_a_bad_token_is_refused_with_a_challenge(url, member_user):
    issue(member_user, name="ci")
    client = clients.bearer("not-a-real-key")
    response = client.get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_good_token_is_let_in(member_user):
    _token, key = issue(member_user, name="ci")
    client = clients.bearer(key)
    assert client.get("/api/v1/nodes/").status_code == 200


def test_a_member_without_the_right_is_forbidden_not_challenged(member_user):
    _token, key = issue(member_user, name="ci")
    client = clients.bearer(key)
    response = client.post("/api/v1/nodes/", {"name": "x", "agent_url": "http://x:1"})
    assert response.status_code == 403
    assert "WWW-Authenticate" not in response
    assert not Node.objects.exists()


def test_session_writes_still_need_the_csrf_token(admin_user):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(admin_user)
    body = {"name": "gpu-x", "agent_url": "http://gpu-x:9400"}
    response = client.post("/api/v1/nodes/", body, format="json")
    assert response.status_code == 403
    assert "CSRF" in response.json()["error"]["message"]
    assert not Node.objects.exists()
    # The same write with the token the page would send goes through.
    client.get("/accounts/login/")  # any page with a form sets the cookie
    csrf = client.cookies["csrftoken"].value
    response = client.post("/api/v1/nodes/", body, format="json", HTTP_X_CSRFTOKEN=csrf)
    assert response.status_code == 201, response.content
