"""The admin's dashboard in Chromium (issue #22): on a laptop (1440 x 900) and a wall
screen (2560 x 1440), in English and in Chinese, the summary, the heatmap and every
panel show, nothing runs off the side, the console stays clean, and when the fleet
socket's first frame arrives (held back until the page was measured, then let through
with the cards' readings changed) the heatmap's cells change colour and no panel moves
by a pixel. Screenshots: test-artifacts/dashboard-<lang>-<width>.png."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from decimal import Decimal

import orjson
import pytest
from django.utils import timezone
from playwright.sync_api import Browser, expect

from alerts.choices import EventState
from pools.models import PoolCard
from quotas.requests.services import create_request
from reports.models import UsageDay
from telemetry import services
from telemetry.poller import PollResult
from tests import clients, procs
from tests.cast import person
from tests.factories import EventFactory, GPUFactory, NodeFactory, gpu_team

pytestmark = [pytest.mark.browser]
ARTIFACTS = procs.REPO / "test-artifacts"
NODES, CARDS = 12, 8
PANELS = (
    "#dashboard-figures",
    "#heatmap-panel",
    "#firing-events",
    "#approvals-waiting",
    "#pool-capacity",
    "#top-tenants",
    "#fleet",
)
BOXES = """(selectors) => selectors.map((s) => {
    const r = document.querySelector(s).getBoundingClientRect();
    return [s, Math.round(r.x + scrollX), Math.round(r.y + scrollY),
            Math.round(r.width), Math.round(r.height)];
})"""


@pytest.fixture
def site(transactional_db, child_env_for_test_db) -> Iterator[str]:
    person("alice")
    team = gpu_team("vision")
    for n in range(NODES):
        node = NodeFactory(name=f"rack-{n:02d}")
        gpus = [GPUFactory(node=node, index=i, uuid=f"GPU-{n}-{i}") for i in range(CARDS)]
        snap = {
            "hostname": node.name,
            "gpus": [
                {
                    "uuid": g.uuid,
                    "index": g.index,
                    "name": "NVIDIA H100 80GB HBM3",
                    "utilization_gpu_pct": (n * 7 + g.index * 13) % 101,
                    "health": "ok",
                    "memory_total_mib": 81920,
                    "memory_used_mib": 1024 * g.index,
                }
                for g in gpus
            ],
        }
        services.record_poll_results([PollResult(node.pk, snap, "", 0.01)])
    for reason in ("pretraining", "eval sweep"):
        create_request(team.dev, **team.ask(reason=reason))
    for n in range(10):  # one noisy rule: one row, "10 x"
        EventFactory(
            rule_key="gpu.unallocated_process",
            rule_name="GPU process without an allocation",
            severity="warning",
            state=EventState.FIRING,
            scope=f"node:rack-{n:02d}",
        )
    EventFactory(state=EventState.FIRING)
    PoolCard.objects.filter(pool=team.pool).update(compute_allocated=60)
    UsageDay.objects.create(
        day=timezone.localdate(),
        tenant_id=team.tenant.pk,
        user_id=1,
        pool_id=team.pool.pk,
        gpu_hours=Decimal("12.5"),
        memory_gib_hours=Decimal(0),
        used_gpu_hours=3.25,
        computed_at=timezone.now(),
    )
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield url


def _changed(frame: str) -> str:
    """The fleet's first frame with every card's utilization moved by 50 points."""
    message = orjson.loads(frame)
    for node in message.get("nodes", []):
        node["cards_util"] = [[i, (u + 50) % 101] for i, u in node.get("cards_util", [])]
    return orjson.dumps(message).decode()


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
@pytest.mark.parametrize(("width", "height"), [(1440, 900), (2560, 1440)])
def test_the_dashboard_fits_and_stays_still_when_live_data_arrives(
    site, browser: Browser, lang, width, height
):
    url = site
    context = browser.new_context(
        viewport={"width": width, "height": height},
        locale="zh-CN" if lang == "zh-hans" else "en-US",
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda e: errors.append(str(e)))
    held: list[str] = []
    sockets = []

    def hold_fleet_frames(ws) -> None:
        server = ws.connect_to_server()
        server.on_message(lambda m: held.append(m) if not sockets[1:] else ws.send(m))
        ws.on_message(lambda m: server.send(m))
        sockets.append(ws)

    page.route_web_socket(re.compile(r"/ws/fleet/$"), hold_fleet_frames)
    try:
        clients.sign_in(page, "alice", at=f"{url}/accounts/login/?next=/", lands_on=r"/$")
        assert page.evaluate("document.documentElement.lang") == lang
        for selector in PANELS:
            expect(page.locator(selector)).to_be_visible()
        expect(page.locator(".firing-count")).to_have_text("10 \u00d7")
        expect(page.locator("#heatmap .hm-cells > a")).to_have_count(NODES * CARDS + 2)
        deadline = time.monotonic() + 15
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert held, "the fleet socket sent no first frame"
        page.evaluate("document.fonts.ready")
        before = page.evaluate(BOXES, list(PANELS))
        cell = page.locator('#heatmap a[title^="rack-00 · GPU 0"]')
        old_class = cell.get_attribute("class")

        # The first frame, let through with the readings changed: cells recoloured.
        for n, frame in enumerate(held):
            sockets[0].send(_changed(frame) if n == 0 else frame)
        sockets.append(None)  # later frames pass at once
        expect(page.locator("#fleet")).to_have_attribute("data-frames", "1", timeout=10_000)
        page.evaluate("() => new Promise((done) => requestAnimationFrame(() => done()))")
        assert cell.get_attribute("class") != old_class, "the heatmap did not follow the frame"
        after = page.evaluate(BOXES, list(PANELS))
        assert after == before, "the layout moved when live data arrived"

        wide = page.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert wide[0] <= wide[1], f"the page is {wide[0]} px wide on a {wide[1]} px screen"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-{lang}-{width}.png"), full_page=True)
        assert errors == [], errors
    finally:
        context.close()


def test_a_heatmap_cell_leads_to_its_card(site, browser: Browser):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    try:
        clients.sign_in(page, "alice", at=f"{site}/accounts/login/?next=/", lands_on=r"/$")
        cell = page.locator('#heatmap a[title^="rack-00 · GPU 0:"]')
        title = cell.get_attribute("title")
        assert re.fullmatch(r"rack-00 · GPU 0: \d+ %", title), title
        cell.click()
        expect(page).to_have_url(re.compile(r"/gpus/\d+/$"))
        expect(page.locator("body")).to_contain_text("GPU-0-0")
    finally:
        context.close()
