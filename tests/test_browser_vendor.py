"""Other vendors' cards in Chromium (issue #25): a node page draws each card's vendor and
its health as the agent said it (Warning, Unhealthy: never Healthy), the vendor tool's
words as text (markup in them stays text), the fleet filter finds a node by its vendor,
and the console stays clean."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from agents.models import GPU
from telemetry import services
from telemetry.poller import PollResult
from tests import clients, procs
from tests.cast import person
from tests.factories import NodeFactory

pytestmark = [pytest.mark.browser]
HOSTILE = '<img src=x onerror="window.pwned=1">Alarm: A4025021'


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, int, int]]:
    """The server's URL, the Ascend node's id and its unhealthy card's (read here: the
    test's body runs in Playwright's event loop, where the ORM may not)."""
    person("alice")
    npu = NodeFactory(name="npu-01")
    cards = [
        {"uuid": "ascend-0", "index": 0, "health": "ok"},
        {"uuid": "ascend-1", "index": 1, "health": "warning", "health_detail": "Warning: 80E1"},
        {"uuid": "ascend-2", "index": 2, "health": "unhealthy", "health_detail": HOSTILE},
    ]
    snap = {"hostname": "npu-01", "gpus": [
        {**c, "vendor": "ascend", "name": "Ascend 910B2C", "memory_total_mib": 65536,
         "memory_used_mib": 1024, "utilization_gpu_pct": 10} for c in cards]}  # fmt: skip
    services.record_poll_results([PollResult(npu.pk, snap, "", 0.01)])
    nv = NodeFactory(name="nv-01")
    snap = {"hostname": "nv-01", "gpus": [{"uuid": "GPU-nv", "index": 0, "health": "ok",
            "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81920}]}  # fmt: skip
    services.record_poll_results([PollResult(nv.pk, snap, "", 0.01)])
    node, bad = GPU.objects.values_list("node_id", "pk").get(uuid="ascend-2")
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url, node, bad


def test_a_node_page_draws_vendor_and_health_words_as_text(site, browser: Browser):
    site, node, gpu = site
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        clients.sign_in(page, "alice", at=f"{site}/accounts/login/?next=/", lands_on=r"/$")
        # The fleet filter finds the node by its vendor's name.
        page.fill("#node-filter", "huawei")
        expect(page.locator('.tile:not([hidden]) [data-field="name"]')).to_have_text(["npu-01"])
        expect(page.locator(".models")).to_contain_text("Huawei Ascend")
        page.goto(f"{site}/nodes/{node}/")
        cards = page.locator(".gpu-card")
        expect(cards).to_have_count(3)
        expect(cards.locator('[data-field="vendor"]')).to_have_text(["Huawei Ascend"] * 3)
        expect(cards.locator('[data-field="health"]')).to_have_text(
            ["Healthy", "Warning", "Unhealthy"]
        )
        details = cards.locator('[data-field="health_detail"]')
        expect(details).to_have_text(["", "Warning: 80E1", HOSTILE])
        assert page.locator(".gpu-card img").count() == 0
        assert page.evaluate("window.pwned") is None
        page.goto(f"{site}/gpus/{gpu}/")
        expect(page.locator('.page-title [data-field="health"]')).to_have_text("Unhealthy")
        expect(page.locator('[data-field="health_detail"]')).to_have_text(HOSTILE)
        expect(page.locator("[data-vendor]")).to_have_text("Huawei Ascend")
        assert page.evaluate("window.pwned") is None
        assert errors == []
    finally:
        page.close()
