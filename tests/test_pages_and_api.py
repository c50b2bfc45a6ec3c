"""Pages and REST endpoints: who may see what, and what bad input gets."""

from __future__ import annotations

import pytest
from django.urls import reverse

from agents.models import GPU, Node
from telemetry import services
from telemetry.poller import PollResult
from tests import clients
from tests.api import error_fields
from tests.factories import NodeFactory
from tokens.interface import issue

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet() -> Node:
    node = NodeFactory(name="gpu-a", agent_token="s3cret-agent-token")
    snap = {
        "hostname": "host-a",
        "gpus": [
            {
                "uuid": "GPU-1",
                "index": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "utilization_gpu_pct": 42,
                "health": "ok",
            },
            {
                "uuid": "GPU-2",
                "index": 1,
                "name": "NVIDIA H100 80GB HBM3",
                "memory_total_mib": 81559,
                "health": "lost",
            },
        ],
    }
    services.record_poll_results([PollResult(node.pk, snap, "", 0.01)])
    return node


def test_dashboard_requires_login(client):
    response = client.get(reverse("telemetry:dashboard"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_dashboard_renders_the_fleet_for_a_member(client, bob, fleet):
    client.force_login(bob)
    response = client.get(reverse("telemetry:dashboard"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "1 node, 2 GPUs" in body
    assert 'id="initial-data"' in body and "gpu-a" in body
    # Tiles aggregate; the cards themselves are on the node's page.
    assert "GPU-1" not in body
    assert "s3cret-agent-token" not in body


def test_node_page_lists_its_cards(client, bob, fleet):
    client.force_login(bob)
    response = client.get(reverse("telemetry:node", args=[fleet.pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "GPU-1" in body and "GPU-2" in body
    assert reverse("api:node-history", args=[fleet.pk]) in body


def test_gpu_page_shows_identity_and_latest_reading(client, bob, fleet):
    client.force_login(bob)
    gpu = GPU.objects.get(uuid="GPU-1")
    response = client.get(reverse("telemetry:gpu", args=[gpu.pk]))
    body = response.content.decode()
    assert response.status_code == 200
    assert "GPU-1" in body and "NVIDIA H100 80GB HBM3" in body
    assert '<span data-field="utilization_gpu_pct">42</span> %' in body


@pytest.mark.parametrize("name", ["telemetry:node", "telemetry:gpu"])
def test_detail_pages_answer_404_for_unknown_ids(client, bob, name):
    client.force_login(bob)
    assert client.get(reverse(name, args=[999999])).status_code == 404


def test_dashboard_speaks_simplified_chinese(client, bob, fleet):
    client.force_login(bob)
    response = client.get(reverse("telemetry:dashboard"), HTTP_ACCEPT_LANGUAGE="zh-hans")
    body = response.content.decode()
    assert '<html lang="zh-hans">' in body
    assert "利用率" in body  # Utilization
    # Chinese punctuation where words are put together: full-width comma and colon.
    comma, colon = "\uff0c", "\uff1a"
    assert f"1 个节点{comma}" in body
    assert f"在线{colon}" in body and "在线:" not in body and f"最后在线{colon}" in body


def test_login_page_shows_an_error_for_a_wrong_password(client, bob):
    response = client.post(reverse("login"), {"username": "bob", "password": "nope"})
    assert response.status_code == 200
    assert "didn" in response.content.decode()


def test_healthz_answers_without_login(client):
    assert client.get("/healthz").json() == {"status": "ok"}


@pytest.mark.parametrize("url", ["/api/v1/nodes/", "/api/v1/gpus/"])
def test_api_refuses_anonymous_callers(url, fleet):
    assert clients.api().get(url).status_code == 401


def test_api_lists_nodes_without_their_tokens(bob, fleet):
    client = clients.api(bob)
    data = client.get("/api/v1/nodes/").json()
    [node] = data["results"]
    assert node["name"] == "gpu-a" and node["gpu_count"] == 2 and node["state"] == "online"
    assert "agent_token" not in node
    assert "s3cret" not in str(data)


def test_api_gpus_carry_their_latest_readings_and_filter(bob, fleet):
    _token, key = issue(bob, name="ci")
    client = clients.bearer(key)
    data = client.get("/api/v1/gpus/", {"health": "ok"}).json()
    [gpu] = data["results"]
    assert gpu["uuid"] == "GPU-1" and gpu["node"] == "gpu-a"
    assert gpu["latest"]["utilization_gpu_pct"] == 42
    detail = client.get(f"/api/v1/gpus/{GPU.objects.get(uuid='GPU-2').pk}/").json()
    assert detail["health"] == "lost"
    assert client.get("/api/v1/gpus/", {"node": "nope"}).json()["count"] == 0


def test_history_api_returns_rollups_for_a_gpu_and_a_node(carol, fleet):
    from datetime import timedelta

    from django.utils import timezone

    from telemetry import rollups, sample_buffer

    now = timezone.now()
    gpu = GPU.objects.get(uuid="GPU-1")
    snap = {
        "gpus": [
            {
                "uuid": "GPU-1",
                "index": 0,
                "utilization_gpu_pct": 80,
                "memory_used_mib": 1000,
                "processes": [{"pid": 1, "user": "frank", "memory_used_mib": 600}],
            }
        ]
    }
    sample_buffer.buffer_samples({fleet.pk: snap}, {"GPU-1": gpu.pk}, now - timedelta(minutes=2))
    rollups.flush(now)
    client = clients.api(carol)
    data = client.get(f"/api/v1/gpus/{gpu.pk}/history/", {"range": "1h"}).json()
    assert data["resolution"] == "1m"
    [point] = data["points"]
    assert (point["util_avg"], point["memory_used_avg_mib"]) == (80, 1000)
    assert data["owners"][0]["owner"] == "frank"  # carol may see owners (test_process_owners.py)
    node_data = client.get(f"/api/v1/nodes/{fleet.pk}/history/", {"range": "7d"}).json()
    assert node_data["resolution"] == "1h" and node_data["points"][0]["util_max"] == 80


def test_history_api_refuses_an_unknown_range(bob, fleet):
    client = clients.api(bob)
    gpu = GPU.objects.get(uuid="GPU-1")
    response = client.get(f"/api/v1/gpus/{gpu.pk}/history/", {"range": "1y"})
    assert response.status_code == 400
    assert "range" in error_fields(response)


def test_api_schema_is_served(bob):
    client = clients.api(bob)
    response = client.get("/api/schema/")
    assert response.status_code == 200
    assert b"/api/v1/gpus/" in response.content


def test_admin_never_echoes_the_agent_token(client, alice, fleet):
    client.force_login(alice)
    response = client.get(reverse("admin:agents_node_change", args=[fleet.pk]))
    assert response.status_code == 200
    assert "s3cret-agent-token" not in response.content.decode()


def test_admin_keeps_the_token_when_the_field_is_left_empty(client, alice, fleet):
    client.force_login(alice)
    url = reverse("admin:agents_node_change", args=[fleet.pk])
    response = client.post(
        url,
        {
            "name": "gpu-a",
            "source": "agent",
            "agent_url": fleet.agent_url,  # a new one would take the token again
            "agent_token": "",
            "labels": "{}",
            "state": "draining",
            "gpus-TOTAL_FORMS": "2",
            "gpus-INITIAL_FORMS": "2",
            "gpus-MIN_NUM_FORMS": "0",
            "gpus-MAX_NUM_FORMS": "1000",
            "gpus-0-id": GPU.objects.get(uuid="GPU-1").pk,
            "gpus-0-node": fleet.pk,
            "gpus-1-id": GPU.objects.get(uuid="GPU-2").pk,
            "gpus-1-node": fleet.pk,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    fleet.refresh_from_db()
    assert fleet.agent_token == "s3cret-agent-token"
    assert fleet.state == "draining"


def _admin_add(client, **fields):
    return client.post(
        reverse("admin:agents_node_add"),
        {
            "source": "agent",
            "agent_token": "t",
            "labels": "{}",
            "state": "offline",
            "gpus-TOTAL_FORMS": "0",
            "gpus-INITIAL_FORMS": "0",
            "gpus-MIN_NUM_FORMS": "0",
            "gpus-MAX_NUM_FORMS": "1000",
            **fields,
        },
    )


def test_admin_rejects_a_malformed_agent_url_and_changes_nothing(client, alice, fleet):
    client.force_login(alice)
    response = _admin_add(client, name="gpu-b", agent_url="not a url")
    assert response.status_code == 200
    assert "agent_url" in response.context["adminform"].form.errors
    assert not Node.objects.filter(name="gpu-b").exists()


def test_admin_applies_the_registration_rules_bare_host_names_included(client, alice, fleet):
    client.force_login(alice)
    # A bare host name, as the pages and the API accept it; the trailing slash is dropped.
    response = _admin_add(client, name="gpu-c", agent_url="http://gpu-node-07:9400/")
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Node.objects.get(name="gpu-c").agent_url == "http://gpu-node-07:9400"
    # The same agent twice is refused, as on the pages.
    response = _admin_add(client, name="gpu-d", agent_url="http://gpu-node-07:9400")
    assert response.status_code == 200
    assert "agent_url" in response.context["adminform"].form.errors
    assert not Node.objects.filter(name="gpu-d").exists()


def test_a_cards_last_seen_is_exact_while_the_database_keeps_it_coarse(client, bob, fleet):
    from datetime import datetime, timedelta

    from django.utils import timezone

    # The database moves last_seen every few minutes only; the latest readings are exact.
    long_ago = timezone.now() - timedelta(minutes=4)
    GPU.objects.update(last_seen=long_ago)
    api = clients.api(bob)
    reported = api.get(f"/api/v1/gpus/{GPU.objects.get(uuid='GPU-1').pk}/").json()["last_seen"]
    seen = datetime.fromisoformat(reported.replace("Z", "+00:00"))
    assert timezone.now() - seen < timedelta(seconds=30)
    client.force_login(bob)
    page = client.get(reverse("telemetry:gpu", args=[GPU.objects.get(uuid="GPU-1").pk]))
    assert page.context["last_seen"] == seen


def test_favicon_is_linked_from_every_page_and_served(client):
    from django.templatetags.static import static

    icon = static("portal/favicon.svg")
    page = client.get(reverse("login")).content.decode()
    assert f'<link rel="icon" href="{icon}"' in page
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == icon
    served = client.get(icon)
    assert served.status_code == 200 and served["Content-Type"].startswith("image/svg+xml")


def test_an_empty_fleet_offers_staff_the_add_and_import_actions(client, admin_user):
    client.force_login(admin_user)
    body = client.get(reverse("telemetry:dashboard")).content.decode()
    assert "No nodes yet." in body
    assert reverse("agents:node_add") in body and reverse("agents:node_import") in body


def test_an_empty_fleet_tells_a_member_who_adds_nodes(client, member_user):
    client.force_login(member_user)
    body = client.get(reverse("telemetry:dashboard")).content.decode()
    assert "No nodes yet." in body and "An administrator registers" in body
    for name in ("agents:node_add", "agents:node_import", "agents:node_list"):
        assert f'href="{reverse(name)}"' not in body
