"""The alert pages: rules, subscriptions, the event history with its filters and pages,
one event with its deliveries, acknowledge; each role allowed and refused, and a member
never sees another tenant's events, rules or subscriptions (pages as the API)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import dateformat, formats, timezone, translation
from rest_framework.test import APIClient

from alerts import outbox
from alerts.choices import EventState, ScopeKind, Severity
from alerts.models import Delivery, DeliveryAttempt, Event, Rule, Subscription
from audit.interface import AuditEntry
from tests import clients
from tests.api import error_fields
from tests.factories import ChannelFactory, EventFactory, NodeFactory, SubscriptionFactory
from tests.tenants import BRAVO_SECRET, teams_fixture  # noqa: F401 (the teams fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def happenings(teams):
    """A platform event, one of acme's and one of bravo's (whose scope names its secret)."""
    return {
        "platform": EventFactory(scope="node:gpu-01 gpu:0", labels={"node": "gpu-01",
                                 "pool": "shared-pool"}, rule_key="gpu-temperature",
                                 rule_name="GPU temperature above 85 °C for 5 minutes"),
        "acme": EventFactory(scope="tenant:acme pool:shared-pool", tenant=teams.acme,
                             severity=Severity.WARNING, labels={"tenant": "acme",
                             "pool": "shared-pool"}, rule_key="quota-used",
                             rule_name="Quota more than 90 % used"),
        "bravo": EventFactory(scope=f"tenant:bravo {BRAVO_SECRET}", tenant=teams.bravo,
                              labels={"tenant": "bravo"}, summary=BRAVO_SECRET),
    }  # fmt: skip


EVERYTHING = {"platform", "acme", "bravo"}
SEES = {
    # Platform admins, the superuser and oscar (by permission alone), alike.
    "alice": EVERYTHING, "oscar": EVERYTHING,
    "carol": {"platform"},  # a node operator: platform events, no tenant's
    "erin": {"acme"}, "andy": {"acme"}, "bob": {"acme"},
    "tom": {"bravo"}, "dave": set(),  # staff, no permission: nothing
}  # fmt: skip
# Who may acknowledge: platform admins every event, node operators the platform's; a
# tenant's admins and approvers its own.
ACKS = {"alice": EVERYTHING, "oscar": EVERYTHING, "carol": {"platform"}, "erin": {"acme"},
        "andy": {"acme"}, "tom": {"bravo"}}  # fmt: skip


# --- events ---------------------------------------------------------------------------------


# One database per test, every actor in it: the roles are loops, not parameters.


def test_the_event_history_lists_exactly_the_events_a_user_would_be_sent(teams, happenings):
    for name, sees in SEES.items():
        client = clients.page(teams.user(name))
        page = client.get("/alerts/events/")
        assert page.status_code == 200
        body = page.content.decode()
        shown = {key for key, event in happenings.items() if f'data-event-id="{event.pk}"' in body}
        assert shown == sees, name
        assert (BRAVO_SECRET in body) == ("bravo" in sees), name
        api = client.get("/api/v1/alert-events/")
        assert {row["id"] for row in api.json()["results"]} == {
            happenings[key].pk for key in sees}, name  # fmt: skip


def test_an_event_page_is_404_for_whoever_would_not_be_sent_it(teams, happenings):
    for name, sees in SEES.items():
        client = clients.page(teams.user(name))
        for key, event in happenings.items():
            answer = client.get(f"/alerts/events/{event.pk}/")
            assert answer.status_code == (200 if key in sees else 404), (name, key)


def test_anonymous_visitors_are_sent_to_log_in(teams, happenings):
    for path in ("/alerts/events/", f"/alerts/events/{happenings['acme'].pk}/",
                 "/alerts/rules/", "/alerts/subscriptions/", "/alerts/events/firing/"):  # fmt: skip
        answer = clients.page().get(path)
        assert answer.status_code == 302 and "/accounts/login/" in answer["Location"]


FILTERS = {
    "state=firing": {"platform", "acme", "bravo"},
    "severity=warning": {"acme"},
    "severity=warning&severity=critical": {"platform", "acme", "bravo"},
    "node=gpu-01": {"platform"},
    "pool=shared-pool": {"platform", "acme"},
    "tenant=acme": {"acme"},
    "state=resolved": set(),
}


def test_the_history_filters_by_state_severity_node_pool_and_tenant(teams, happenings):
    client = clients.page(teams.user("alice"))
    for query, expected in FILTERS.items():
        page = client.get(f"/alerts/events/?{query}")
        assert page.status_code == 200
        body = page.content.decode()
        shown = {k for k, e in happenings.items() if f'data-event-id="{e.pk}"' in body}
        assert shown == expected, query
        api = client.get(f"/api/v1/alert-events/?{query}").json()["results"]
        assert {row["id"] for row in api} == {happenings[k].pk for k in expected}, query


def test_the_history_filters_by_rule_and_time(teams, happenings):
    old = happenings["platform"]
    Event.objects.filter(pk=old.pk).update(started_at=timezone.now() - timedelta(days=3))
    client = clients.page(teams.user("alice"))
    since = (timezone.localtime() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    body = client.get(f"/alerts/events/?since={since}").content.decode()
    assert f'data-event-id="{old.pk}"' not in body
    assert f'data-event-id="{happenings["acme"].pk}"' in body
    body = client.get(f"/alerts/events/?until={since}").content.decode()
    assert f'data-event-id="{old.pk}"' in body and "data-event-id" in body
    rule = Rule.objects.get(key="quota-used")
    Event.objects.filter(pk=happenings["acme"].pk).update(rule=rule)
    body = client.get(f"/alerts/events/?rule={rule.pk}").content.decode()
    assert body.count('class="event-row"') == 1
    assert f'data-event-id="{happenings["acme"].pk}"' in body


def test_a_bad_filter_is_a_400_naming_it(teams, happenings):
    client = clients.page(teams.user("alice"))
    for query in ("state=burning", "severity=loud", "rule=x", "since=yesterday",
                  "until=2026-13-40"):  # fmt: skip
        page = client.get(f"/alerts/events/?{query}")
        assert page.status_code == 400, query
        name = query.split("=")[0]
        assert f"<code>{name}</code>" in page.content.decode()
        api = client.get(f"/api/v1/alert-events/?{query}")
        assert api.status_code == 400 and name in error_fields(api), query


def test_the_history_is_paged_fifty_at_a_time(teams):
    for _ in range(55):
        EventFactory()
    client = clients.page(teams.user("alice"))
    first = client.get("/alerts/events/?state=firing").content.decode()
    assert first.count('class="event-row"') == 50
    assert "?state=firing&amp;page=2" in first
    second = client.get("/alerts/events/?state=firing&page=2").content.decode()
    assert second.count('class="event-row"') == 5
    assert client.get("/alerts/events/?page=3").status_code == 404
    assert client.get("/alerts/events/?page=x").status_code == 404


def test_the_event_page_shows_its_deliveries_and_every_attempt(teams, happenings, settings):
    settings.ALERT_HTTP_ALLOWED_HOSTS = []
    event = happenings["acme"]
    erin = teams.user("erin")
    # A webhook into a denied network: one attempt, a permanent error, the reason shown.
    mine = ChannelFactory(owner=erin, name="erin-hook", secrets={"url": "https://127.0.0.1:9/h"})
    theirs = ChannelFactory(owner=teams.user("andy"), name="andy-private-hook")
    for channel in (mine, theirs):
        Delivery.objects.create(channel=channel, event=event, next_attempt_at=timezone.now())
    outbox.deliver(Delivery.objects.get(channel=mine).pk)
    body = clients.page(teams.user("erin")).get(f"/alerts/events/{event.pk}/").content.decode()
    assert "erin-hook" in body and "permanent error" in body
    assert "andy-private-hook" not in body  # another person's channel is theirs to know
    admin = clients.page(teams.user("alice")).get(f"/alerts/events/{event.pk}/").content.decode()
    assert "erin-hook" in admin and "andy-private-hook" in admin and "Not tried yet." in admin


def test_the_channel_and_event_pages_list_an_attempt_alike_but_for_the_date(teams, happenings):
    event = happenings["acme"]
    erin = teams.user("erin")
    channel = ChannelFactory(owner=erin, name="erin-hook")
    delivery = Delivery.objects.create(channel=channel, event=event, next_attempt_at=timezone.now())
    started = timezone.now().replace(microsecond=0)
    DeliveryAttempt.objects.create(
        delivery=delivery, number=1, started_at=started, duration_ms=42, ok=False,
        permanent=True, error="refused",
    )  # fmt: skip
    client = clients.page(teams.user("erin"))
    on_channel = client.get(f"/alerts/channels/{channel.pk}/").content.decode()
    on_event = client.get(f"/alerts/events/{event.pk}/").content.decode()
    when = timezone.localtime(started)
    # The channel page dates its deliveries already: its attempts say the time only.
    assert f"1. {dateformat.format(when, 'H:i:s')} · 42 ms ·" in on_channel
    assert f"1. {formats.date_format(when, 'DATETIME_FORMAT')} · 42 ms ·" in on_event
    for body in (on_channel, on_event):
        assert 'class="list-unstyled mb-0 small attempts"' in body
        failed = '<span class="text-danger">permanent error</span>: '
        assert failed + '<span class="text-break">refused</span>' in body


# --- acknowledge ----------------------------------------------------------------------------


def test_acknowledging_is_for_who_answers_for_the_event(teams, happenings):
    for name, sees in SEES.items():
        client = clients.page(teams.user(name))
        for key, event in happenings.items():
            answer = client.post(f"/alerts/events/{event.pk}/acknowledge/")
            event.refresh_from_db()
            if key in ACKS.get(name, set()):
                assert answer.status_code == 302, (name, key)
                assert event.state == EventState.ACKNOWLEDGED
                assert event.acknowledged_by == teams.user(name) and event.acknowledged_at
            else:
                assert answer.status_code == (403 if key in sees else 404), (name, key)
                assert event.state == EventState.FIRING and event.acknowledged_by is None
        Event.objects.update(state=EventState.FIRING, acknowledged_by=None,
                             acknowledged_at=None)  # fmt: skip


def test_acknowledging_records_who_and_when_and_audits_it(teams, happenings):
    event = happenings["acme"]
    client = clients.page(teams.user("andy"))
    answer = client.post(f"/alerts/events/{event.pk}/acknowledge/")
    assert answer.status_code == 302 and answer["Location"] == f"/alerts/events/{event.pk}/"
    body = client.get(answer["Location"]).content.decode()
    assert 'id="acknowledged-by"' in body and "andy" in body
    assert 'id="acknowledge"' not in body  # no button once acknowledged
    entry = AuditEntry.objects.get(action="alerts.event.acknowledge")
    assert entry.actor_id == teams.user("andy").pk and entry.after == {"state": "acknowledged"}


def test_acknowledging_twice_or_a_resolved_event_is_409_and_changes_nothing(teams, happenings):
    event = happenings["acme"]
    client = clients.page(teams.user("erin"))
    assert client.post(f"/alerts/events/{event.pk}/acknowledge/").status_code == 302
    again = client.post(f"/alerts/events/{event.pk}/acknowledge/")
    assert again.status_code == 409
    assert "not in a state that allows this" in again.content.decode()
    Event.objects.filter(pk=event.pk).update(state=EventState.RESOLVED)
    assert client.post(f"/alerts/events/{event.pk}/acknowledge/").status_code == 409
    api = client.post(f"/api/v1/alert-events/{event.pk}/acknowledge/")
    assert api.status_code == 409
    assert AuditEntry.objects.filter(action="alerts.event.acknowledge").count() == 1


def test_acknowledging_needs_a_post_and_an_existing_event(teams, happenings):
    client = clients.page(teams.user("alice"))
    assert client.get(f"/alerts/events/{happenings['acme'].pk}/acknowledge/").status_code == 405
    assert client.post("/alerts/events/999999/acknowledge/").status_code == 404


def test_an_offsite_next_after_acknowledging_is_not_followed(teams, happenings):
    event = happenings["platform"]
    answer = clients.page(teams.user("carol")).post(f"/alerts/events/{event.pk}/acknowledge/",
                                          {"next": "https://evil.example/"})  # fmt: skip
    assert answer["Location"] == f"/alerts/events/{event.pk}/"


# --- the dashboard strip --------------------------------------------------------------------


# A tenant's members without the fleet's view land on their home from "/" (quotas'
# detour), which shows the dashboard's strip too.
AT_HOME = {"erin", "andy", "bob", "tom"}


def test_the_dashboard_lists_the_firing_events_each_user_may_see(teams, happenings):
    for name, sees in SEES.items():
        client = clients.page(teams.user(name))
        response = client.get("/", follow=True)
        assert response.redirect_chain == ([("/home/", 302)] if name in AT_HOME else []), name
        body = response.content.decode()
        assert 'id="firing-events"' in body
        assert {k for k, e in happenings.items() if f'data-event-id="{e.pk}"' in body} == sees
        strip = client.get("/alerts/events/firing/").content.decode()
        assert {k for k, e in happenings.items() if f'data-event-id="{e.pk}"' in strip} == sees


def test_the_strip_leaves_out_acknowledged_and_resolved_events(teams, happenings):
    Event.objects.filter(pk=happenings["acme"].pk).update(state=EventState.ACKNOWLEDGED)
    Event.objects.filter(pk=happenings["bravo"].pk).update(state=EventState.RESOLVED)
    strip = clients.page(teams.user("alice")).get("/alerts/events/firing/").content.decode()
    # One firing row; the part's list of recent events (any state) comes after it.
    assert strip.count('firing-event"') == 1
    assert 'id="recent-events"' in strip
    assert f'data-event-id="{happenings["platform"].pk}"' in strip


# --- rules ----------------------------------------------------------------------------------


def test_everyone_reads_the_rules_that_apply_to_them_and_no_other_tenants(teams):
    bravo_rule = Rule.objects.create(key="bravo-only", name=f"{BRAVO_SECRET} rule",
                                     condition="quota_used_pct", threshold=50,
                                     scope_kind=ScopeKind.TENANT, tenant=teams.bravo)  # fmt: skip
    readers = (("alice", True), ("oscar", True), ("tom", True), ("bob", False), ("dave", False))
    for name, sees_bravo in readers:
        client = clients.page(teams.user(name))
        page = client.get("/alerts/rules/")
        assert page.status_code == 200
        assert 'data-rule-key="gpu-temperature"' in page.content.decode()
        assert (BRAVO_SECRET in page.content.decode()) == sees_bravo, name
        api = client.get(f"/api/v1/alert-rules/{bravo_rule.pk}/")
        assert api.status_code == (200 if sees_bravo else 404), name


def test_only_the_platform_admin_changes_rules(teams):
    rule = Rule.objects.get(key="gpu-temperature")
    for name in ("bob", "erin", "carol", "dave"):
        client = clients.page(teams.user(name))
        assert client.get("/alerts/rules/add/").status_code == 403
        assert client.get(f"/alerts/rules/{rule.pk}/edit/").status_code == 403
        assert client.post(f"/alerts/rules/{rule.pk}/toggle/").status_code == 403
        assert client.post(f"/alerts/rules/{rule.pk}/delete/").status_code == 403
        rule.refresh_from_db()
        assert rule.enabled
        assert "/alerts/rules/add/" not in client.get("/alerts/rules/").content.decode()


@pytest.mark.parametrize(("name", "expected"), [("tom", 403), ("bob", 404), ("dave", 404)])
def test_changing_another_tenants_rule_is_404_on_the_pages_and_the_api(teams, name, expected):
    """A rule the reader cannot see is not there for them, whether read or changed; one
    they see (tom, bravo's admin) is refused with 403: pages and API alike."""
    rule = Rule.objects.create(key="bravo-only", name=f"{BRAVO_SECRET} rule",
                               condition="quota_used_pct", threshold=50,
                               scope_kind=ScopeKind.TENANT, tenant=teams.bravo)  # fmt: skip
    page, url = clients.page(teams.user(name)), f"/api/v1/alert-rules/{rule.pk}/"
    assert page.get(f"/alerts/rules/{rule.pk}/edit/").status_code == expected
    assert page.post(f"/alerts/rules/{rule.pk}/toggle/").status_code == expected
    assert page.post(f"/alerts/rules/{rule.pk}/delete/").status_code == expected
    api = clients.api(teams.user(name))
    answers = [
        api.patch(url, {"threshold": 70}, format="json"),
        api.put(url, {"name": "x", "condition": "quota_used_pct", "threshold": 70}, format="json"),
        api.delete(url),
    ]
    assert [r.status_code for r in answers] == [expected] * 3
    assert BRAVO_SECRET not in b"".join(r.content for r in answers).decode()
    assert Rule.objects.filter(pk=rule.pk, threshold=50, enabled=True).exists()
    assert not AuditEntry.objects.filter(action__startswith="alerts.rule").exists()


@pytest.mark.parametrize("name", ["alice", "oscar"])
def test_the_platform_admin_adds_edits_disables_and_deletes_a_rule(teams, name):
    """The superuser and a platform admin by permission alone (oscar) alike."""
    client = clients.page(teams.user(name))
    assert "/alerts/rules/add/" in client.get("/alerts/rules/").content.decode()
    form = {"name": "Hot pool", "condition": "temperature_c", "comparison": "gt",
            "threshold": "80", "for_seconds": "120", "severity": "warning",
            "scope_kind": "pool", "pool": str(teams.pool.pk), "renotify_seconds": "600",
            "enabled": "on"}  # fmt: skip
    assert client.post("/alerts/rules/add/", form).status_code == 302
    rule = Rule.objects.get(name="Hot pool")
    assert (rule.threshold, rule.pool_id, rule.for_seconds) == (80, teams.pool.pk, 120)
    assert client.get(f"/alerts/rules/{rule.pk}/edit/").status_code == 200
    answer = client.post(f"/alerts/rules/{rule.pk}/edit/", {**form, "threshold": "90"})
    assert answer.status_code == 302
    rule.refresh_from_db()
    assert rule.threshold == 90
    client.post(f"/alerts/rules/{rule.pk}/toggle/")
    rule.refresh_from_db()
    assert not rule.enabled
    client.post(f"/alerts/rules/{rule.pk}/delete/")
    assert not Rule.objects.filter(pk=rule.pk).exists()
    actions = set(AuditEntry.objects.filter(action__startswith="alerts.rule.")
                  .values_list("action", flat=True))  # fmt: skip
    assert actions == {"alerts.rule.create", "alerts.rule.update", "alerts.rule.delete"}


BAD_RULES = (
    ({"threshold": "500"}, "threshold"), ({"threshold": ""}, "threshold"),
    ({"scope_kind": "pool", "pool": ""}, "pool"), ({"name": ""}, "name"),
    ({"condition": "alertmanager"}, "condition"), ({"for_seconds": "-1"}, "for_seconds"),
)  # fmt: skip


def test_a_bad_rule_is_refused_with_the_field_named_and_nothing_saved(teams):
    form = {"name": "Too hot", "condition": "temperature_c", "comparison": "gt",
            "threshold": "80", "for_seconds": "0", "severity": "warning", "scope_kind": "all",
            "renotify_seconds": "0"}  # fmt: skip
    before = Rule.objects.count()
    client = clients.page(teams.user("alice"))
    for change, field in BAD_RULES:
        answer = client.post("/alerts/rules/add/", {**form, **change})
        assert answer.status_code == 400, change
        assert answer.context["form"].errors.get(field), answer.context["form"].errors
    assert Rule.objects.count() == before


def test_a_built_in_rule_keeps_its_condition_and_cannot_be_deleted(teams):
    rule = Rule.objects.get(key="node-offline")
    client = clients.page(teams.user("alice"))
    client.post(f"/alerts/rules/{rule.pk}/delete/")
    assert Rule.objects.filter(pk=rule.pk).exists()
    form = {"name": rule.name, "comparison": "gt", "for_seconds": "30", "severity": "critical",
            "scope_kind": "all", "renotify_seconds": "3600", "condition": "temperature_c",
            "enabled": "on"}  # fmt: skip
    assert client.post(f"/alerts/rules/{rule.pk}/edit/", form).status_code == 302
    rule.refresh_from_db()
    assert rule.condition == "node_offline" and rule.for_seconds == 30


# --- default rules in the reader's language -------------------------------------------------


def test_default_rule_names_and_descriptions_show_in_chinese(teams, happenings):
    client = clients.page(teams.user("alice"))
    client.cookies["django_language"] = "zh-hans"
    with translation.override("zh-hans"):
        name = Rule.objects.get(key="gpu-temperature").label
        description = Rule.objects.get(key="gpu-temperature").explanation
    assert name != "GPU temperature above 85 °C for 5 minutes"
    assert description and "cooling" not in description
    rules = client.get("/alerts/rules/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert name in rules and description in rules
    events = client.get("/alerts/events/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert name in events and "GPU temperature above 85" not in events


def test_a_renamed_default_rule_shows_its_new_name_as_typed(teams):
    Rule.objects.filter(key="gpu-temperature").update(name="Our own hot-card rule")
    client = clients.page(teams.user("alice"))
    client.cookies["django_language"] = "zh-hans"
    assert "Our own hot-card rule" in client.get("/alerts/rules/").content.decode()


# --- subscriptions --------------------------------------------------------------------------


def test_each_user_sees_their_own_subscriptions_and_their_tenants_as_admin(teams):
    own = {name: SubscriptionFactory(owner=teams.user(name)) for name in ("bob", "erin", "tom")}
    acme_sub = SubscriptionFactory(owner=None, tenant=teams.acme)
    bravo_sub = SubscriptionFactory(owner=None, tenant=teams.bravo)
    expected = {
        "alice": {*own.values(), acme_sub, bravo_sub},
        "oscar": {*own.values(), acme_sub, bravo_sub},
        "erin": {own["erin"], acme_sub},
        "bob": {own["bob"]},
        "tom": {own["tom"], bravo_sub},
        "dave": set(),
    }
    for name, subs in expected.items():
        client = clients.page(teams.user(name))
        body = client.get("/alerts/subscriptions/").content.decode()
        shown = {s for s in Subscription.objects.all()
                 if f"/alerts/subscriptions/{s.pk}/edit/" in body}  # fmt: skip
        assert shown == subs, name
        for sub in Subscription.objects.all():
            status = client.get(f"/alerts/subscriptions/{sub.pk}/edit/").status_code
            assert status == (200 if sub in subs else 404), (name, sub.pk)


def test_a_member_subscribes_their_own_channel_and_edits_and_deletes_it(teams):
    bob = teams.user("bob")
    channel = ChannelFactory(owner=bob)
    rule = Rule.objects.get(key="quota-used")
    client = clients.page(teams.user("bob"))
    form = {"channel": str(channel.pk), "rules": [str(rule.pk)], "min_severity": "info",
            "scope_kind": "all", "quiet_start": "22:00", "quiet_end": "07:00",
            "enabled": "on"}  # fmt: skip
    assert client.post("/alerts/subscriptions/add/", form).status_code == 302
    sub = Subscription.objects.get(owner=bob)
    assert list(sub.rules.all()) == [rule] and sub.quiet_start.hour == 22
    assert client.post(f"/alerts/subscriptions/{sub.pk}/edit/",
                       {**form, "min_severity": "critical"}).status_code == 302  # fmt: skip
    sub.refresh_from_db()
    assert sub.min_severity == Severity.CRITICAL
    assert client.post(f"/alerts/subscriptions/{sub.pk}/delete/").status_code == 302
    assert not Subscription.objects.filter(pk=sub.pk).exists()


def test_a_tenant_admin_subscribes_the_tenants_channel(teams):
    channel = ChannelFactory(owner=None, tenant=teams.acme)
    client = clients.page(teams.user("erin"))
    form = {"tenant": str(teams.acme.pk), "channel": str(channel.pk), "min_severity": "warning",
            "scope_kind": "all", "enabled": "on"}  # fmt: skip
    assert client.post("/alerts/subscriptions/add/", form).status_code == 302
    assert Subscription.objects.get(tenant=teams.acme).channel == channel


BAD_SUBSCRIPTIONS = (
    ("bob", {"channel": "other"}, "channel"),            # another person's channel
    ("bob", {"tenant": "acme"}, "tenant"),                # not acme's admin
    ("tom", {"tenant": "acme"}, "tenant"),                # another tenant
    ("bob", {"rules": "bravo"}, "rules"),                 # another tenant's rule
    ("bob", {"quiet_start": "25:00"}, "quiet_start"),
    ("bob", {"quiet_start": "22:00", "quiet_end": ""}, "quiet_end"),
    ("bob", {"scope_kind": "pool", "scope_pool": ""}, "scope_pool"),
    ("bob", {"scope_kind": "pool", "scope_pool": "nosuchpool"}, "scope_pool"),  # forged
    ("bob", {"scope_kind": "node", "scope_node": "nosuchnode"}, "scope_node"),
    ("bob", {"scope_kind": "tenant", "scope_tenant": "bravo"}, "scope_tenant"),  # not bob's
)  # fmt: skip


def test_a_bad_subscription_is_refused_with_the_field_named(teams):
    other = ChannelFactory(owner=teams.user("andy"))
    bravo_rule = Rule.objects.create(
        key="bravo-r", name="b", condition="quota_used_pct", threshold=5, scope_kind="tenant",
        tenant=teams.bravo,
    )  # fmt: skip
    lookup = {"other": str(other.pk), "acme": str(teams.acme.pk), "bravo": str(bravo_rule.pk)}
    own = {who: ChannelFactory(owner=teams.user(who)) for who in ("bob", "tom")}
    for who, change, field in BAD_SUBSCRIPTIONS:
        values = {"channel": str(own[who].pk), "min_severity": "warning", "scope_kind": "all"}
        values.update({k: lookup.get(v, v) for k, v in change.items()})
        answer = clients.page(teams.user(who)).post("/alerts/subscriptions/add/", values)
        assert answer.status_code == 400, change
        assert answer.context["form"].errors.get(field), answer.context["form"].errors
    assert not Subscription.objects.exists()


def test_a_subscriptions_scope_is_chosen_from_lists_of_what_the_user_sees(teams):
    """As rules offer theirs: the pools, the nodes and bob's own tenants, by name."""
    node = NodeFactory(name="rack7-gpu-node-03")
    channel = ChannelFactory(owner=teams.user("bob"))
    client = clients.page(teams.user("bob"))
    body = client.get("/alerts/subscriptions/add/").content.decode()
    assert 'name="scope_name"' not in body
    assert '<option value="shared-pool">shared-pool</option>' in body
    assert f'<option value="{node.name}">{node.name}</option>' in body
    assert '<option value="acme">Acme</option>' in body and BRAVO_SECRET not in body
    assert "Choose a pool" in body and "---------" not in body
    form = {"channel": str(channel.pk), "min_severity": "warning", "scope_kind": "pool",
            "scope_pool": "shared-pool", "scope_node": node.name}  # fmt: skip
    assert client.post("/alerts/subscriptions/add/", form).status_code == 302
    sub = Subscription.objects.get(owner=teams.user("bob"))
    assert (sub.scope_kind, sub.scope_name) == ("pool", "shared-pool")  # the chosen kind's
    edit = client.get(f"/alerts/subscriptions/{sub.pk}/edit/").content.decode()
    assert '<option value="shared-pool" selected>shared-pool</option>' in edit
    answer = client.post(f"/alerts/subscriptions/{sub.pk}/edit/",
                         {**form, "scope_kind": "tenant", "scope_tenant": "bravo"})  # fmt: skip
    assert answer.status_code == 400
    assert answer.context["form"].errors["scope_tenant"] == ["Choose a listed tenant."]
    sub.refresh_from_db()
    assert (sub.scope_kind, sub.scope_name) == ("pool", "shared-pool")


def test_the_rule_form_offers_the_same_lists_by_id(teams):
    body = clients.page(teams.user("alice")).get("/alerts/rules/add/").content.decode()
    assert f'<option value="{teams.pool.pk}">shared-pool</option>' in body
    assert "Choose a tenant" in body and "---------" not in body


@pytest.mark.parametrize(
    ("name", "scope", "message"),
    [("bob", {"scope_kind": "pool", "scope_name": "nosuchpool"}, "No pool has this slug."),
     ("bob", {"scope_kind": "node", "scope_name": "nosuchnode"}, "No node has this name."),
     ("bob", {"scope_kind": "tenant", "scope_name": "bravo"},
      "None of your tenants has this slug."),
     ("bob", {"scope_kind": "tenant", "scope_name": "nosuchtenant"},
      "None of your tenants has this slug."),
     ("bob", {"scope_kind": "pool", "scope_name": ""}, "Name the pool, node or tenant.")],
)  # fmt: skip
def test_the_api_refuses_a_scope_naming_nothing_the_user_sees(teams, name, scope, message):
    api = APIClient()
    api.force_authenticate(teams.user(name))
    channel = ChannelFactory(owner=teams.user(name))
    answer = api.post("/api/v1/alert-subscriptions/", {"channel": channel.pk, **scope},
                      format="json")  # fmt: skip
    assert answer.status_code == 400 and set(error_fields(answer)) == {"scope_name"}, answer.content
    assert message in answer.content.decode() and BRAVO_SECRET not in answer.content.decode()
    assert not Subscription.objects.exists()
    sub = SubscriptionFactory(owner=teams.user(name), channel=channel)
    answer = api.patch(f"/api/v1/alert-subscriptions/{sub.pk}/", scope, format="json")
    assert answer.status_code == 400 and set(error_fields(answer)) == {"scope_name"}
    sub.refresh_from_db()
    assert (sub.scope_kind, sub.scope_name) == (ScopeKind.ALL, "")
    assert not AuditEntry.objects.filter(action__startswith="alerts.subscription").exists()


def test_the_api_takes_a_scope_that_exists_and_keeps_a_stale_one_on_other_changes(teams):
    api = APIClient()
    api.force_authenticate(teams.user("bob"))
    channel = ChannelFactory(owner=teams.user("bob"))
    answer = api.post(
        "/api/v1/alert-subscriptions/",
        {"channel": channel.pk, "scope_kind": "tenant", "scope_name": "acme"},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    pk = answer.json()["id"]
    # A scope saved before it was checked, or whose pool has gone since.
    Subscription.objects.filter(pk=pk).update(scope_kind="pool", scope_name="gone-pool")
    answer = api.patch(f"/api/v1/alert-subscriptions/{pk}/", {"enabled": False}, format="json")
    assert answer.status_code == 200 and answer.json()["scope_name"] == "gone-pool"


def test_the_strip_groups_a_noisy_rule_into_one_row_and_keeps_the_others(teams):
    noisy = Rule.objects.get(key="process-unallocated")
    hot = Rule.objects.get(key="gpu-temperature")
    for n in range(12):
        EventFactory(rule=noisy, rule_key=noisy.key, rule_name=noisy.name,
                     severity=Severity.WARNING, tenant=None, scope=f"node:n{n} gpu:0",
                     summary=f"node:n{n} gpu:0: 7816 MiB")  # fmt: skip
    lone = EventFactory(rule=hot, rule_key=hot.key, rule_name=hot.name, tenant=None,
                        severity=Severity.CRITICAL, summary="node:n1 gpu:3: 93 °C")  # fmt: skip
    strip = clients.page(teams.user("alice")).get("/alerts/events/firing/").content.decode()
    rows = re.findall(r'<li class="list-group-item[^>]*data-count="(\d+)"', strip)
    assert rows == ["1", "12"], rows  # the critical one first, the twelve in one row
    assert "12 \u00d7" in strip and f"?state=firing&amp;rule={noisy.pk}" in strip
    assert f'data-event-id="{lone.pk}"' in strip and "93 °C" in strip
    assert strip.count("7816") == 0  # the grouped events' summaries are not listed
