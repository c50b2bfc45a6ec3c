"""DONE-WHEN for gated Jobs (issue #26): a Job submitted to a mapped namespace with the
portal's gate becomes one GPU request, an approver approves it in the browser, and the next
gate pass lifts the gate from every Pod the Job made (tests/kube_api.py playing the
cluster and its Job controller; daphne serving the portal on the test database)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from playwright.sync_api import expect

from clusters import gates, workloads
from clusters.models import ClusterWorkload, WorkloadState
from clusters.services import map_namespace, register_cluster
from quotas.choices import RequestState
from tests import clients, procs
from tests.factories import gpu_team
from tests.kube_api import serving
from tests.kube_world import NS, TOKEN
from tests.test_cluster_jobs import job

pytestmark = [pytest.mark.browser]


@pytest.fixture
def world(transactional_db, child_env_for_test_db) -> Iterator[dict]:
    """Before the browser starts its event loop: the team, the cluster with a gated Job of
    two Pods, its first pass (a pending request), and the portal served by daphne."""
    team = gpu_team("vision")
    with (serving(TOKEN) as api,
          procs.celery_worker(child_env_for_test_db, "notices", "-Q", "deliveries"),
          procs.daphne(child_env_for_test_db) as (url, _)):  # fmt: skip
        cluster = register_cluster(actor=None, token=TOKEN, name="prod", api_url=api.url,
                                   pool=team.pool, kueue=False)  # fmt: skip
        map_namespace(cluster, actor=None, namespace=NS, tenant=team.tenant)
        the_job = api.add("jobs", job(parallelism=2))
        api.play_job_controller()
        gates.pass_cluster(cluster)
        link = ClusterWorkload.objects.get()
        assert link.kind == "Job" and link.request.state == RequestState.PENDING
        yield {"url": url, "team": team, "api": api, "cluster": cluster, "job": the_job}


def _gated(world) -> list[bool]:
    return [workloads.is_gated(p, False) for p in world["api"].pods_of(world["job"])]


def _next_pass_once_placed(world) -> tuple[str, str]:
    """In a thread of its own (the browser's loop makes this one async for Django)."""
    try:
        link = ClusterWorkload.objects.select_related("request").get()
        deadline = time.monotonic() + 30
        while link.request.state != RequestState.ALLOCATED and time.monotonic() < deadline:
            time.sleep(0.2)
            link.request.refresh_from_db()
        gates.pass_cluster(world["cluster"])
        link.refresh_from_db()
        return link.request.state, link.state
    finally:
        connection.close()


def test_a_gated_job_approved_in_the_browser_loses_its_gate(world, browser):
    assert _gated(world) == [True, True]
    context = browser.new_context()
    page = context.new_page()
    try:
        clients.sign_in(page, world["team"].approver.username,
                        at=f"{world['url']}/accounts/login/?next=/approvals/",
                        lands_on=re.escape("/approvals/") + "$")  # fmt: skip
        row = page.locator(".approval-row")
        expect(row).to_have_count(1, timeout=10_000)
        expect(row.first).to_contain_text("Kubernetes Job acme-train/sweep")
        row.first.locator(".approve-button").click()
        expect(page.locator(".approval-row")).to_have_count(0, timeout=10_000)
    finally:
        context.close()
    with ThreadPoolExecutor(1) as thread:
        states = thread.submit(_next_pass_once_placed, world).result()
    assert states == (RequestState.ALLOCATED, WorkloadState.ADMITTED)
    assert _gated(world) == [False, False]
