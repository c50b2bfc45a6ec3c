"""Every main page in zh-Hans shows no English a person would read.

Headless Chromium visits each page as a platform admin who chose 简体中文, collects what a
reader sees (``document.body.innerText``, less code, identifiers and the seeded objects'
own names) and fails on any English word outside the allow-list of names and units. The
failure lists, per page, each line that still holds English: what the catalogue or the
templates still owe. Screenshots go to test-artifacts/zh-<page>.png.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import Browser

from audit.interface import AuditEntry
from quotas.requests.services import create_request
from quotas.tenancy.preferences import set_preferences
from tests import clients, procs
from tests.factories import (
    ChannelFactory,
    EventFactory,
    GpuMinuteFactory,
    SubscriptionFactory,
    UserFactory,
    gpu_team,
    held_allocation,
)
from tokens.services import create_service_account

pytestmark = [pytest.mark.browser]
ARTIFACTS = procs.REPO / "test-artifacts"

# Words that stay as they are in Chinese text: product and protocol names, units, the
# languages' own names in the switch.
ALLOWED = {
    "GPU", "GPUs", "vGPU", "vGPUs", "NVIDIA", "API", "REST", "CUDA", "MIG", "MPS", "HAMi",
    "HAMi-core", "DCGM", "dcgm-exporter", "Prometheus", "Grafana", "Alertmanager",
    "Kubernetes", "Kueue", "DRA", "NVML", "PCIe", "SM", "ECC", "XID", "UUID", "ID", "IP",
    "URL", "HTTP", "HTTPS", "SMTP", "CSV", "JSON", "YAML", "HMAC", "CI", "CLI", "IM",
    "DingTalk", "WeCom", "Feishu", "Slack", "Webhook", "webhook", "ReDoc", "Swagger",
    "OpenAPI", "gpuctl", "Bearer", "English", "GiB", "MiB", "TiB", "KiB", "GB", "MB", "MHz",
    "W", "Wh", "kWh", "UTC", "PCI", "Unix", "Lark", "GPU-hours", "vCPU", "SXM", "HBM", "A100",
    "H100", "Tesla", "AMD", "DCU", "NPU",
}  # fmt: skip
WORD = re.compile(r"[A-Za-z][A-Za-z0-9'_.-]*[A-Za-z0-9]|[A-Za-z]")

# What the reader sees: the body's text without code, identifiers and options that are
# their own value (slugs, zone names). The page is left as it was; a copy is read.
VISIBLE_TEXT = """() => {
    const copy = document.body.cloneNode(true);
    // Code, and the avatar's initial (of a user's name).
    copy.querySelectorAll('code, pre, kbd, samp, script, style, template, [translate=no], .avatar')
        .forEach((el) => el.remove());
    copy.querySelectorAll('option').forEach((el) => {
        if (el.value && el.textContent.trim() === el.value) el.remove();
    });
    // innerText needs layout: the copy is drawn off screen, then removed.
    copy.style.position = 'absolute'; copy.style.left = '-100000px';
    document.documentElement.append(copy);
    const text = copy.innerText;
    copy.remove();
    return text;
}"""


def english_lines(text: str, names: set[str]) -> list[str]:
    """The lines of ``text`` that hold an English word once ``names`` are taken out."""
    found = []
    for line in text.splitlines():
        # Time zone names, addresses, paths, key=value syntax and °C first, then the
        # seeded names.
        rest = re.sub(r"\b[A-Z][a-z]+/[A-Z][A-Za-z_]+|\S+@\S+|https?://\S+|/\S*|\w+=\w+|°C",
                      " ", line)  # fmt: skip
        for name in sorted(names, key=len, reverse=True):
            rest = rest.replace(name, " ")
        words = [w for w in WORD.findall(rest) if w not in ALLOWED and not _is_id(w)]
        if words and line.strip() not in found:
            found.append(line.strip())
    return found


def _is_id(word: str) -> bool:
    # Model numbers and hashes ("80GB", "fp-3", "GPU-0000abcd"): a digit inside.
    return any(ch.isdigit() for ch in word)


@pytest.fixture
def world(transactional_db) -> dict:
    """A platform admin in Chinese, and one of each thing the main pages show: a node of
    cards in a pool, a tenant with its quota, a pending and a placed request, a firing
    alert, a channel and its subscription, a service account; their names and ids."""
    admin = UserFactory(username="zhadmin", is_superuser=True, is_staff=True)
    set_preferences(admin, language="zh-hans", time_zone="Asia/Shanghai")
    team = gpu_team("vision", cards=2)
    now = timezone.now()
    held = held_allocation(
        team.tenant, team.pool, team.dev, now - timedelta(hours=2), compute_pct=50
    )
    pending = create_request(team.dev, **team.ask(reason="训练"))
    minute = now.replace(second=0, microsecond=0)
    for back in range(1, 30):  # half an hour of history for the charts
        GpuMinuteFactory(gpu=team.cards[0], bucket=minute - timedelta(minutes=back),
                         util_avg=40.0 + back, util_max=60.0 + back,
                         memory_used_avg_mib=3000.0, memory_used_max_mib=4000.0)  # fmt: skip
    event = EventFactory(rule_name="GPU 过热", summary="GPU 0 温度 91 °C")
    channel = ChannelFactory(owner=admin, name="值班群")
    SubscriptionFactory(owner=admin, channel=channel)
    service = create_service_account(admin, tenant=team.tenant, name="ci-bot")
    node = team.cards[0].node
    names = {
        admin.username, team.tenant.name, team.tenant.slug, team.pool.name, team.pool.slug,
        team.admin.username, team.approver.username, team.dev.username, node.name,
        node.hostname, team.cards[0].model, team.cards[0].uuid, channel.name, service.name,
        service.user.username, event.scope, "GPU Portal", event.rule_key, *event.labels, "ci-bot",
    }  # fmt: skip
    # The audit log keeps each target's name as it was written (in the language of the
    # request that made it, English here): data, like the names above.
    names |= set(AuditEntry.objects.exclude(target_repr="").values_list("target_repr", flat=True))
    tenant = team.tenant.slug
    pages = {
        "fleet": "/",
        "node": f"/nodes/{node.pk}/",
        "gpu": f"/gpus/{team.cards[0].pk}/",
        "pools": "/pools/",
        "pool": f"/pools/{team.pool.slug}/",
        "requests": "/requests/",
        "allocation": f"/allocations/{held.pk}/",
        "request": f"/requests/{pending.pk}/",
        "ask-for-gpus": "/requests/new/",
        "approvals": "/approvals/",
        "tenants": "/tenants/",
        "tenant": f"/tenants/{tenant}/",
        "quota": f"/tenants/{tenant}/quotas/{team.quota.pk}/edit/",
        "members": f"/tenants/{tenant}/members/",
        "alerts": "/alerts/events/",
        "alert": f"/alerts/events/{event.pk}/",
        "rules": "/alerts/rules/",
        "channels": "/alerts/channels/",
        "channel": f"/alerts/channels/{channel.pk}/",
        "subscriptions": "/alerts/subscriptions/",
        "idle-report": "/idle/",
        "accounting": "/accounting/",
        "audit": "/audit/",
        "account": "/account/",
        "service-accounts": f"/tenants/{tenant}/service-accounts/",
        "nodes": "/nodes/",
        "users": "/users/",
        "add-node": "/nodes/add/",
        "add-rule": "/alerts/rules/add/",
        "add-channel": "/alerts/channels/add/",
        "add-subscription": "/alerts/subscriptions/add/",
        "reclaim-policies": "/idle/policies/",
        "unit-prices": "/accounting/prices/",
    }
    return {"user": admin.username, "names": names, "pages": pages}


def test_every_main_page_in_chinese_shows_no_english(world, live_server, browser: Browser):
    context = browser.new_context(locale="zh-CN", viewport={"width": 1440, "height": 900})
    page = context.new_page()
    ARTIFACTS.mkdir(exist_ok=True)
    found: dict[str, list[str]] = {}
    try:
        clients.sign_in(page, world["user"], at=f"{live_server.url}/accounts/login/")
        page.wait_for_url(re.compile(r"/$"))
        for label, path in world["pages"].items():
            response = page.goto(live_server.url + path)
            assert response is not None and response.status == 200, (label, path)
            assert page.evaluate("document.documentElement.lang") == "zh-hans", label
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(ARTIFACTS / f"zh-{label}.png"), full_page=True)
            lines = english_lines(page.evaluate(VISIBLE_TEXT), world["names"])
            if lines:
                found[f"{label} ({path})"] = lines
    finally:
        context.close()
    report = "\n".join(
        f"{where}:\n" + "\n".join(f"    {line}" for line in lines) for where, lines in found.items()
    )
    assert not found, f"English on zh-Hans pages:\n{report}"


# The first chart's time at its last data point, and what its legend says of it.
LEGEND_AT_LAST_POINT = """() => {
    const plot = document.querySelector('.history').charts[0];
    const xs = plot.data[0];
    const at = xs[xs.length - 2];  // the last point (the window's end is an empty one)
    plot.setCursor({ left: plot.valToPos(at, 'x'), top: 10 });
    return [at, plot.root.querySelector('.u-legend .u-series .u-value').textContent];
}"""


def test_the_charts_tell_time_in_the_readers_zone(world, live_server, browser: Browser):
    # A browser in New York, a reader who chose Shanghai: the axis follows the reader.
    context = browser.new_context(locale="zh-CN", timezone_id="America/New_York")
    page = context.new_page()
    try:
        clients.sign_in(page, world["user"], at=f"{live_server.url}/accounts/login/")
        page.wait_for_url(re.compile(r"/$"))
        page.goto(live_server.url + world["pages"]["gpu"])
        page.wait_for_function("() => document.querySelector('.history')?.charts?.length > 0")
        at, legend = page.evaluate(LEGEND_AT_LAST_POINT)
    finally:
        context.close()
    shanghai = datetime.fromtimestamp(at, ZoneInfo("Asia/Shanghai"))
    # uPlot's legend: "2026-12-03 10:47pm".
    hour = shanghai.hour % 12 or 12
    assert legend.startswith(f"{shanghai:%Y-%m-%d} {hour}:{shanghai:%M}"), (legend, shanghai)


def test_the_check_finds_english_and_lets_names_and_units_through():
    names = {"vision", "gpu-node-01"}
    text = "节点 gpu-node-01\n显存 80 GiB · NVIDIA A100 · 91 °C\nWasted (descending)\n租户 vision"
    assert english_lines(text, names) == ["Wasted (descending)"]
