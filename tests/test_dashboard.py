"""The admin's fleet dashboard (issue #22): its plain parts (the heatmap's cells and counts,
pool capacity in cards, the top tenants by GPU-hours, the waiting requests, the firing
alerts grouped by rule, the panels' order) and "/" itself: an admin sees every panel, a
member outside the tenants (who keeps the fleet) none of the admin's."""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.test import RequestFactory
from django.urls import reverse
from django.utils import timezone

from alerts import event_views
from alerts.choices import EventState
from pools import dashboard as pools_dashboard
from pools.models import PoolCard
from quotas.requests import dashboard as requests_dashboard
from quotas.requests.services import create_request
from reports import dashboard as reports_dashboard
from reports.models import UsageDay
from telemetry import heatmap, panels, services
from telemetry.poller import PollResult
from tests.factories import EventFactory, GPUFactory, NodeFactory, TenantFactory, gpu_team
from tests.tenants import teams_fixture  # noqa: F401

pytestmark = pytest.mark.django_db


# --- the heatmap and the counts -------------------------------------------------------------


@pytest.mark.parametrize(
    ("util", "expected"),
    [
        (None, "un"),
        (0, "u0"),
        (9.9, "u0"),
        (10, "u1"),
        (55, "u5"),
        (100, "u10"),
        (130, "u10"),
        (-3, "u0"),
    ],
)
def test_a_cell_is_coloured_by_tenths_of_utilization(util, expected):
    assert heatmap.bucket(util) == expected


def test_counts_tell_busy_idle_and_silent_cards():
    tiles = [
        {
            "id": 1,
            "name": "a",
            "gpu_count": 4,
            "cards_util": [(0, 90), (1, 4.9), (2, 5), (3, None)],
        },
        {"id": 2, "name": "b", "gpu_count": 2, "cards_util": []},  # no fresh reading
    ]
    assert heatmap.counts(tiles) == heatmap.Counts(cards=6, busy=2, idle=1, silent=3)


def test_heat_nodes_put_each_nodes_cards_in_index_order_with_their_readings():
    tiles = [
        {"id": 7, "name": "n-b", "cards_util": [(1, 50), (0, 10)]},
        {"id": 3, "name": "n-a", "cards_util": []},
    ]
    gpus = [(71, 7, 1), (70, 7, 0), (72, 7, 2), (30, 3, 0)]
    nodes = heatmap.heat_nodes(tiles, gpus)
    assert [(n.node_id, n.cells) for n in nodes] == [
        (7, [(70, 0, 10), (71, 1, 50), (72, 2, None)]),  # card 2 did not report
        (3, [(30, 0, None)]),
    ]


def test_the_heatmap_links_each_cell_to_its_card_and_names_it_in_its_title():
    html = heatmap.render([heatmap.HeatNode(5, "gpu-<a>", [(42, 3, 45.5), (43, 4, None)])])
    assert (
        'data-node="5"' in html and "gpu-&lt;a&gt;" in html and "<a>" not in html.replace("<a ", "")
    )  # the node's name escaped, never markup
    assert f'class="u4" data-i="3" href="{reverse("telemetry:gpu", args=[42])}"' in html
    assert 'title="gpu-&lt;a&gt; · GPU 3: 45.5 %"' in html
    assert 'title="gpu-&lt;a&gt; · GPU 4: no reading"' in html and 'class="un"' in html


def test_tiles_carry_each_cards_utilization_by_index():
    node = NodeFactory(name="gpu-a")
    snap = {
        "hostname": "h",
        "gpus": [
            {"uuid": "G-0", "index": 0, "utilization_gpu_pct": 12, "health": "ok"},
            {"uuid": "G-1", "index": 1, "health": "ok"},
        ],
    }
    services.record_poll_results([PollResult(node.pk, snap, "", 0.01)])
    from telemetry import readings

    [tile] = readings.node_summaries([node.pk])
    assert sorted(tile["cards_util"]) == [(0, 12), (1, None)]


# --- pools: capacity in cards -------------------------------------------------------------


def test_pool_capacity_reads_in_cards_not_percent():
    team = gpu_team("vision", cards=2)
    first, second = PoolCard.objects.filter(pool=team.pool).order_by("gpu_id")
    PoolCard.objects.filter(pk=first.pk).update(
        compute_allocated=100, held_whole=True, slices=1, memory_allocated_mib=10240
    )
    PoolCard.objects.filter(pk=second.pk).update(compute_allocated=55)  # reserved, no slice yet
    [bar], total = pools_dashboard.capacity_bars()
    assert total == 1 and bar.cards == 2
    assert bar.compute_text == "1.55 / 2"  # cards, not "155 / 200 %"
    assert bar.memory_text == "10.0 / 160.0"
    assert bar.share == pytest.approx(0.775)
    held, allocated, capacity = pools_dashboard.allocated_cards()
    assert (held, allocated, capacity) == (2, 155, 200)  # both cards have compute taken


def test_the_fullest_pools_come_first_and_the_rest_are_counted():
    full, empty = gpu_team("full", cards=1), gpu_team("empty", cards=1)
    PoolCard.objects.filter(pool=full.pool).update(compute_allocated=100)
    bars, total = pools_dashboard.capacity_bars(limit=1)
    assert [b.name for b in bars] == [full.pool.name] and total == 2
    assert empty.pool.name not in [b.name for b in bars]


def test_only_pool_managers_and_who_sees_every_lease_see_the_capacity(alice, oscar, bob, dave):
    assert pools_dashboard.sees_capacity(alice) and pools_dashboard.sees_capacity(oscar)
    assert not pools_dashboard.sees_capacity(bob) and not pools_dashboard.sees_capacity(dave)


# --- reports: the top tenants -------------------------------------------------------------


def _day(day: date, tenant_id: int, held: str, used: float, user_id: int = 1) -> UsageDay:
    return UsageDay(
        day=day,
        tenant_id=tenant_id,
        user_id=user_id,
        pool_id=1,
        gpu_hours=Decimal(held),
        memory_gib_hours=Decimal(0),
        used_gpu_hours=used,
        computed_at=timezone.now(),
    )


def test_top_tenants_rank_by_held_and_by_used_over_the_window():
    today = date(2026, 12, 4)
    big, busy, old = (TenantFactory(name=n) for n in ("big", "busy", "old"))
    UsageDay.objects.bulk_create(
        [
            _day(today, big.pk, "40", 2.0),
            _day(today - timedelta(days=1), big.pk, "20", 1.0, 2),
            _day(today, busy.pk, "30", 25.0),
            _day(today - timedelta(days=7), old.pk, "900", 800.0),  # outside the 7 days
            _day(today, 0, "0", 0.0),  # a day's empty mark, no tenant
        ]
    )
    top = reports_dashboard.top_tenants(days=7, today=today)
    assert top.since == date(2026, 11, 28)
    assert [(t.name, t.held_gpu_hours) for t in top.by_held] == [("big", 60), ("busy", 30)]
    assert [(t.name, t.used_gpu_hours) for t in top.by_used] == [("busy", 25.0), ("big", 3.0)]
    assert reports_dashboard.top_tenants(days=7, limit=1, today=today).by_used[0].name == "busy"


# --- quotas: waiting for approval ---------------------------------------------------------


def test_waiting_requests_are_the_readers_to_decide_oldest_first():
    team = gpu_team("vision")  # no auto-approval: every request waits
    first = create_request(team.dev, **team.ask(reason="first"))
    second = create_request(team.dev, **team.ask(reason="second"))
    shown, total = requests_dashboard.waiting(team.approver, limit=1)
    assert [r.pk for r in shown] == [first.pk] and total == 2
    assert requests_dashboard.waiting(team.dev) == ([], 0)  # nobody decides their own
    assert second.pk in [r.pk for r in requests_dashboard.waiting(team.approver)[0]]


# --- alerts: grouped by rule, and recent --------------------------------------------------


def _request(user):
    request = RequestFactory().get("/")
    request.user = user
    return request


def test_ten_firing_events_of_one_rule_are_one_row_and_one_figure(alice):
    for _n in range(10):
        EventFactory(
            rule_key="gpu.unallocated_process",
            rule_name="GPU process without an allocation",
            state=EventState.FIRING,
        )
    EventFactory(state=EventState.FIRING)
    EventFactory(state=EventState.RESOLVED, rule_key="gpu.xid", rule_name="XID")
    groups = event_views.firing_groups(_request(alice))
    assert sorted(g.count for g in groups) == [1, 10]
    [figure] = event_views.dashboard_figures(_request(alice))
    assert (figure.value, figure.tone) == ("11", "danger") and "2 rules" in figure.detail
    recent = event_views.recent_events(_request(alice), limit=3)
    assert len(recent) == 3 and recent[0].rule_key == "gpu.xid"  # the newest, resolved too


# --- the panels' registry -----------------------------------------------------------------


def test_panels_come_in_their_order_whatever_the_order_of_registration(monkeypatch):
    monkeypatch.setattr(panels, "_panels", [])
    panels.add_dashboard_panel(lambda r: "late", order=50)
    panels.add_dashboard_panel(lambda r: "", order=1)  # nothing to show: left out
    panels.add_dashboard_panel(lambda r: "early", order=5)
    panels.add_dashboard_panel(lambda r: "default")
    assert panels.dashboard_panels(None) == ["early", "late", "default"]


def test_the_apps_register_their_panels_in_the_admins_reading_order():
    names = [p.__module__ for _order, p in panels._panels]
    assert names.index("alerts.event_views") < names.index("quotas.requests.dashboard")
    assert names.index("quotas.requests.dashboard") < names.index("pools.dashboard")
    assert names.index("pools.dashboard") < names.index("reports.dashboard")


# --- "/" ----------------------------------------------------------------------------------

ADMIN_PANELS = ("approvals-waiting", "pool-capacity", "top-tenants")


def _polled_fleet(nodes: int = 2, cards: int = 2) -> None:
    for n in range(nodes):
        node = NodeFactory(name=f"gpu-{n}")
        gpus = [GPUFactory(node=node, index=i, uuid=f"GPU-{n}-{i}") for i in range(cards)]
        snap = {
            "hostname": node.name,
            "gpus": [
                {
                    "uuid": g.uuid,
                    "index": g.index,
                    "utilization_gpu_pct": 30 * g.index,
                    "health": "ok",
                }
                for g in gpus
            ],
        }
        services.record_poll_results([PollResult(node.pk, snap, "", 0.01)])


def test_an_admin_sees_every_panel_at_the_root(client, alice, teams):
    _polled_fleet()
    team = gpu_team("vision")
    create_request(team.dev, **team.ask())
    EventFactory(state=EventState.FIRING)
    PoolCard.objects.filter(pool=team.pool).update(compute_allocated=75)
    UsageDay.objects.bulk_create([_day(timezone.localdate(), teams.acme.pk, "12.5", 3.25)])
    client.force_login(alice)
    body = client.get("/").content.decode()
    for part in ("dashboard-figures", "heatmap", "firing-events", *ADMIN_PANELS):
        assert f'id="{part}"' in body, part
    # The panels in their order: alerts, approvals, pools, tenants.
    places = [body.index(f'id="{p}"') for p in ("firing-events", *ADMIN_PANELS)]
    assert places == sorted(places)
    assert "1.5 / 2 GPUs" in body  # the pool's compute in cards, not "150 / 200 %"
    assert re.search(r"<bdi[^>]*>Acme</bdi><span[^>]*>12.5</span>", body)
    # The heatmap: every polled card a cell, linked and named.
    assert body.count('href="/gpus/') >= 4 and "gpu-1 · GPU 1: 30 %" in body
    for label in ("GPUs", "Allocated", "Busy", "Idle", "Alerts firing"):
        assert f">{label}<" in body, label


def test_a_member_who_keeps_the_fleet_sees_none_of_the_admins_panels(client, dave, teams):
    _polled_fleet()
    client.force_login(dave)  # staff without permissions, in no tenant: not sent home
    response = client.get("/")
    body = response.content.decode()
    assert response.status_code == 200 and 'id="heatmap"' in body
    for part in ADMIN_PANELS:
        assert f'id="{part}"' not in body, part
    assert ">Allocated<" not in body


def test_the_dashboard_speaks_chinese_with_full_width_punctuation(client, alice, teams):
    _polled_fleet()
    client.force_login(alice)
    body = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert '<html lang="zh-hans">' in body
    # The capacity bar's label takes the reader's colon (full-width), its unit in cards.
    assert 'aria-label="\u5df2\u5206\u914d\u7b97\u529b\uff1a0 / 0 GPU"' in body
    assert "Compute allocated: " not in body
