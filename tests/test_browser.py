"""What a person sees: log in, and watch a GPU card's utilization change live.

Runs twice: on the embedded default exactly as the README's first command
starts it, and on the full stack (daphne, Celery worker and beat, PostgreSQL,
Redis) as production runs it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from agents.models import GPU, Node
from telemetry import rollups, sample_buffer
from tests import clients, procs
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.stack]

ARTIFACTS = procs.REPO / "test-artifacts"


def log_in_and_watch_a_card_change(
    browser: Browser, url: str, user: str, password: str, shot: Path
) -> None:
    page: Page = browser.new_page()
    try:
        page.goto(url)
        expect(page).to_have_url(re.compile(r"/accounts/login/"))
        clients.sign_in(page, user, password)
        tiles = page.locator(".tile")
        expect(tiles.first).to_be_visible(timeout=20_000)
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        # The fleet page shows nodes, not cards; a node's tile leads to its cards.
        assert page.locator(".gpu-card").count() == 0
        tiles.first.click()
        expect(page).to_have_url(re.compile(r"/nodes/\d+/$"))
        cards = page.locator(".gpu-card")
        expect(cards.first).to_be_visible(timeout=20_000)
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        # Remember every card's utilization, then wait, without reloading, for one to move.
        page.evaluate(
            """() => { window.__initial = Object.fromEntries([...document.querySelectorAll(
                '.gpu-card')].map(c => [c.dataset.gpuUuid,
                c.querySelector('[data-field=utilization_gpu_pct]').textContent])); }"""
        )
        page.wait_for_function(
            """() => [...document.querySelectorAll('.gpu-card')].some(c =>
                window.__initial[c.dataset.gpuUuid] !== undefined &&
                c.querySelector('[data-field=utilization_gpu_pct]').textContent !==
                window.__initial[c.dataset.gpuUuid])""",
            timeout=20_000,
        )
        assert page.evaluate("() => window.__initial !== undefined"), "the page reloaded"
        values = cards.locator('[data-field="utilization_gpu_pct"]').all_text_contents()
        assert all(v.isdigit() and 0 <= int(v) <= 100 for v in values), values
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
    finally:
        page.close()


def test_embedded_demo_shows_live_cards(browser, tmp_path):
    """README command 1's final step, with no PostgreSQL or Redis configured."""
    port, agent_port = procs.free_port(), procs.free_ports(3)
    env = procs.embedded_env(tmp_path, GPU_POLL_INTERVAL="1")
    demo = procs.start(
        "demo",
        [
            procs.PYTHON,
            "manage.py",
            "demo",
            "--port",
            str(port),
            "--agent-port",
            str(agent_port),
            "--nodes",
            "3",
            "--gpus",
            "4",
        ],
        env,
    )
    try:
        # As long as test_demo_schedule waits: seeding is slow on a busy machine.
        [login] = demo.wait_for("Log in as", timeout=240)
        user, password = re.search(r"Log in as (\S+) / (\S+)", login).groups()
        assert "(embedded," in "".join(demo.lines)
        assert (tmp_path / "postgres" / "PG_VERSION").exists()
        log_in_and_watch_a_card_change(
            browser,
            f"http://127.0.0.1:{port}/",
            user,
            password,
            ARTIFACTS / "dashboard-embedded.png",
        )
    finally:
        assert demo.stop() in (0, -15), "".join(demo.lines[-30:])


@pytest.fixture
def full_stack(transactional_db, child_env_for_test_db, sim_agents, tmp_path):
    agents = sim_agents(2, 4)
    for i, url in enumerate(agents.urls):
        Node.objects.create(name=f"rack1-{i + 1:02d}", agent_url=url, agent_token=agents.token)
    # dana watches the fleet and may see who runs on a card (the history's owners table).
    UserFactory(username="dana", permissions=["telemetry.view_process_owners"])
    port = procs.free_port()
    env = child_env_for_test_db
    daphne = [str(procs.BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port),
              "portal.asgi:application"]  # fmt: skip
    beat = [str(procs.BIN / "celery"), "-A", "portal", "beat", "--loglevel", "INFO",
            "--schedule", str(tmp_path / "beat-schedule")]  # fmt: skip
    started = [procs.start("daphne", daphne, env), procs.start("beat", beat, env)]
    try:
        procs.wait_http(f"http://127.0.0.1:{port}/healthz", proc=started[0])
        started.append(procs.start_celery_worker(env, "browser"))
        yield f"http://127.0.0.1:{port}/"
    finally:
        for proc in started:
            proc.stop()


def test_full_stack_shows_live_cards(full_stack, browser):
    log_in_and_watch_a_card_change(
        browser, full_stack, "dana", "dana-pw-1", ARTIFACTS / "dashboard-full-stack.png"
    )


@pytest.fixture
def gpu_with_history(full_stack):
    """A card of the full stack with 30 minutes of rollups behind it."""
    from datetime import timedelta

    from django.utils import timezone

    from agents.models import GPU
    from telemetry import rollups, sample_buffer

    deadline = time.monotonic() + 30
    while not (gpu := GPU.objects.order_by("pk").first()):
        assert time.monotonic() < deadline, "the worker never recorded a poll"
        time.sleep(0.3)
    now = timezone.now()
    for minutes_ago in range(30, 0, -1):
        snapshot = {"gpus": [{
            "uuid": gpu.uuid, "index": gpu.index, "utilization_gpu_pct": 40 + minutes_ago,
            "memory_used_mib": 1000 * minutes_ago, "power_w": 200.0, "temperature_c": 60,
            "processes": [{"pid": 7, "user": "carol", "memory_used_mib": 900}],
        }]}  # fmt: skip
        at = now - timedelta(minutes=minutes_ago)
        sample_buffer.buffer_samples({gpu.node_id: snapshot}, {gpu.uuid: gpu.pk}, at)
    # The worker's own flush may take some minutes first; together they cover all.
    rollups.flush(now)
    return f"{full_stack}gpus/{gpu.pk}/"


def test_gpu_page_draws_history_charts_and_owners(gpu_with_history, full_stack, browser):
    page = browser.new_page()
    try:
        clients.sign_in(page, "dana", at=full_stack)
        expect(page.locator(".tile").first).to_be_visible(timeout=20_000)
        page.goto(gpu_with_history)
        expect(page.locator(".chart canvas")).to_have_count(4, timeout=10_000)
        expect(page.locator(".owners-table")).to_contain_text("carol")
        # The title reads "GPU 0 · <model>", not "#0NVIDIA..." run together.
        title = page.locator("h1.page-title").inner_text()
        assert re.match(r"GPU \d+ · NVIDIA", title), title
        # Utilization is drawn on 0-100 %, whatever the card's values.
        y = page.evaluate("() => document.querySelector('.history').charts[0].scales.y")
        assert (y["min"], y["max"]) == (0, 100), y
        # The page is live: its card's readings change without a reload.
        expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
        page.evaluate(
            """() => { window.__seen = document.querySelector(
                '#gpu [data-field=last_seen]').dateTime; }"""
        )
        page.wait_for_function(
            """() => document.querySelector('#gpu [data-field=last_seen]').dateTime
                !== window.__seen""",
            timeout=20_000,
        )
        util = page.locator("#gpu [data-field=utilization_gpu_pct]").inner_text()
        assert util.isdigit() and 0 <= int(util) <= 100, util
        page.click("[data-range='24h']")
        expect(page.locator(".history")).to_have_attribute("data-loaded", "24h")
        expect(page.locator(".chart canvas")).to_have_count(4)
        page.screenshot(path=str(ARTIFACTS / "gpu-history.png"), full_page=True)
    finally:
        page.close()


@pytest.mark.xfail(
    strict=True,
    reason="Swagger UI renders only the first tag since DELETE "
    "/api/v1/clusters/{id}/namespaces/{namespace}/ is in the schema (bisected to 4a9a68a; "
    "the schema validates, no console error): an open defect, docs/api.md",
)
def test_api_docs_render_the_operations_without_internet(live_server, browser):
    """Swagger UI from the installation: every request that leaves the portal is refused."""
    page = browser.new_page()
    outside: list[str] = []

    def only_the_portal(route) -> None:
        if route.request.url.startswith(live_server.url):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    try:
        page.route("**/*", only_the_portal)
        page.goto(f"{live_server.url}/api/docs/")
        nodes = page.locator(".opblock-summary-path[data-path='/api/v1/nodes/']")
        expect(nodes.first).to_be_visible(timeout=20_000)
        assert page.locator(".opblock").count() > 5
        assert outside == []
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "api-docs.png"))
    finally:
        page.close()


T = TypeVar("T")


def off_this_thread(work: Callable[[], T]) -> T:
    """Run ORM work in another thread: Django refuses it beside Playwright's event loop."""

    def run() -> T:
        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


def record_minute(gpu: GPU, at: datetime, util: int) -> None:
    """One poll's reading of ``gpu`` at ``at``, then the flush beat runs after each minute."""
    snapshot = {"gpus": [{
        "uuid": gpu.uuid, "index": gpu.index, "utilization_gpu_pct": util,
        "memory_used_mib": 2048, "power_w": 250.0, "temperature_c": 55,
    }]}  # fmt: skip
    sample_buffer.buffer_samples({gpu.node_id: snapshot}, {gpu.uuid: gpu.pk}, at)
    rollups.flush(timezone.now())


@pytest.fixture
def history_site(transactional_db, child_env_for_test_db) -> Iterator[tuple[str, GPU]]:
    """daphne alone on the test database, and a card with minutes 30 to 2 ago recorded."""
    node = Node.objects.create(name="hist-01")
    gpu = GPU.objects.create(node=node, index=0, uuid="GPU-hist-0", model="NVIDIA H100 80GB HBM3")
    get_user_model().objects.create_user("erin", password="erin-pw-1")
    now = timezone.now()
    for minutes_ago in range(30, 1, -1):
        record_minute(gpu, now - timedelta(minutes=minutes_ago), 30 + minutes_ago)
    with procs.daphne(child_env_for_test_db) as (url, _):
        yield f"{url}/", gpu


# The first chart's x scale and how many minutes it draws (the window's ends are empty).
FIRST_CHART = """() => { const u = document.querySelector('.history').charts[0];
    return { min: u.scales.x.min, max: u.scales.x.max,
             points: u.data[1].filter((v) => v !== null).length,
             last: u.data[0][u.data[0].length - 2] }; }"""


def test_history_charts_span_the_chosen_range_and_grow_without_reload(history_site, browser):
    site, gpu = history_site
    page = browser.new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url) if "/history/" in r.url else None)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        # The page's timers run on Playwright's clock, so a minute passes at once below.
        page.clock.install()
        clients.sign_in(page, "erin", at=site)
        expect(page).not_to_have_url(re.compile(r"/accounts/login/"))
        page.goto(f"{site}gpus/{gpu.pk}/")
        history = page.locator(".history")
        expect(history).to_have_attribute("data-loaded", "1h")
        expect(page.locator(".chart canvas")).to_have_count(4, timeout=10_000)
        first = page.evaluate(FIRST_CHART)
        assert first["max"] - first["min"] == 3600
        assert abs(first["max"] - time.time()) < 30, "the window ends now"
        assert first["points"] == 29

        # Each range's axis spans it exactly, ending now, with one set of charts on screen.
        for name, seconds in [("7d", 7 * 86400), ("24h", 86400), ("1h", 3600)]:
            page.click(f"[data-range='{name}']")
            expect(history).to_have_attribute("data-loaded", name)
            page.wait_for_function(
                f"() => {{ const u = document.querySelector('.history').charts[0];"
                f" return u && u.scales.x.max - u.scales.x.min === {seconds}; }}"
            )
            scale = page.evaluate(FIRST_CHART)
            assert abs(scale["max"] - time.time()) < 30, (name, scale)
            assert page.evaluate("() => document.querySelector('.history').charts.length") == 4
            expect(page.locator(".chart canvas")).to_have_count(4)

        # A minute finishes and is flushed; a minute later the chart has it, without a reload.
        page.evaluate("() => { window.__sameDocument = true; }")
        # The second chart is zoomed in (as a drag does): a refresh must not undo that.
        zoom = {"min": scale["min"] + 600, "max": scale["min"] + 1200}
        page.evaluate("(z) => document.querySelector('.history').charts[1].setScale('x', z)", zoom)
        requests.clear()
        off_this_thread(lambda: record_minute(gpu, timezone.now() - timedelta(minutes=1), 99))
        page.clock.fast_forward(61_000)
        page.wait_for_function(
            "() => document.querySelector('.history').charts[0].data[1]"
            ".filter((v) => v !== null).length === 30",
            timeout=10_000,
        )
        grown = page.evaluate(FIRST_CHART)
        assert page.evaluate("() => window.__sameDocument === true"), "the page reloaded"
        assert grown["last"] > first["last"] and grown["max"] - grown["min"] == 3600
        assert grown["max"] > scale["max"], "the window moved on to the new now"
        zoomed = page.evaluate(
            "() => { const x = document.querySelector('.history').charts[1].scales.x;"
            " return { min: x.min, max: x.max }; }"
        )
        assert zoomed == zoom
        # One refresh: the timers of the ranges shown before were cancelled, not left running.
        assert len(requests) == 1, requests
        expect(page.locator(".chart canvas")).to_have_count(4)
        assert not errors, errors
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "gpu-history-growing.png"), full_page=True)
    finally:
        page.close()


def test_layout_fits_a_laptop_a_phone_and_a_wide_screen(full_stack, browser):
    """The shared page layout (Tabler on Bootstrap 5): its CSS is loaded, the sections
    can be reached at every width, a phone never scrolls sideways, a wide screen is used."""
    ARTIFACTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    try:
        clients.sign_in(page, "dana", at=full_stack)
        expect(page.locator(".tile").first).to_be_visible(timeout=20_000)
        # The kit's stylesheet is applied: its custom properties and the card's border.
        assert page.evaluate(
            "getComputedStyle(document.documentElement).getPropertyValue('--tblr-primary')"
        ).strip()
        radius = page.evaluate("getComputedStyle(document.querySelector('.tile')).borderRadius")
        assert radius != "0px", radius
        # Laptop: the sidebar shows the sections, no toggler needed.
        fleet_link = page.locator("#sidebar-menu a.nav-link", has_text="Fleet")
        expect(fleet_link).to_be_visible()
        expect(fleet_link).to_have_attribute("aria-current", "page")
        expect(page.locator(".navbar-toggler")).to_be_hidden()
        page.screenshot(path=str(ARTIFACTS / "layout-1366.png"))

        # Phone: the menu is folded behind the toggler, and nothing is wider than the screen.
        page.set_viewport_size({"width": 390, "height": 844})
        expect(fleet_link).to_be_hidden()
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        page.screenshot(path=str(ARTIFACTS / "layout-390.png"), full_page=True)
        page.click(".navbar-toggler")
        expect(fleet_link).to_be_visible()
        page.screenshot(path=str(ARTIFACTS / "layout-390-menu.png"))
        fleet_link.click()
        expect(page.locator(".tile").first).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        # A node's page on the phone: its cards and history fit as well.
        page.locator(".tile").first.click()
        expect(page.locator(".gpu-card").first).to_be_visible(timeout=20_000)
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")

        # Wide screen: the content takes the width, not a centred column.
        page.set_viewport_size({"width": 1920, "height": 1080})
        page.go_back()
        expect(page.locator(".tile").first).to_be_visible()
        width = page.evaluate("document.getElementById('content').getBoundingClientRect().width")
        assert width > 1600, width
        page.screenshot(path=str(ARTIFACTS / "layout-1920.png"))
    finally:
        context.close()
