"""The provisioned Grafana dashboard's queries get data from a real Prometheus
scraping a real portal (daphne) that has just polled a real agent."""

from __future__ import annotations

import json
import time

import pytest

from agents.models import Node
from telemetry import services
from tests import procs

DASHBOARD = procs.REPO / "deploy" / "grafana" / "dashboards" / "gpu-portal-fleet.json"


def panel_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


@pytest.fixture
def portal(transactional_db, child_env_for_test_db, sim_agents):
    agents = sim_agents(2, 4)
    for i, url in enumerate(agents.urls):
        Node.objects.create(name=f"n{i}", agent_url=url, agent_token=agents.token,
                            labels={"rack": "r1"})  # fmt: skip
    Node.objects.create(name="gone", agent_url=f"http://127.0.0.1:{procs.free_port()}")
    services.poll_fleet()
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url.removeprefix("http://")


def test_every_panel_of_the_portal_dashboard_gets_data(portal, prometheus):
    url = prometheus({"gpu-portal": [portal]})
    # rate() needs two scrapes; wait for three.
    deadline = time.monotonic() + 30
    scrapes = 'count_over_time(up{job="gpu-portal"}[1m])'
    while time.monotonic() < deadline:
        result = procs.instant_query(url, scrapes)
        if result and int(result[0]["value"][1]) >= 3:
            break
        time.sleep(0.5)
    empty = [(title, expr) for title, expr in panel_queries()
             if not procs.instant_query(url, expr)]  # fmt: skip
    assert not empty, f"panels without data: {empty}"
    [up] = procs.instant_query(url, 'up{job="gpu-portal"}')
    assert up["value"][1] == "1"
