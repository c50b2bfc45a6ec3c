"""Event summaries are written when shown, in the reader's language and with units: a
page's reader's, an email's subscriber's; a parameter an agent sent is shown as text,
escaped; an event from before summary keys shows the text it stored."""

from __future__ import annotations

import email
import importlib

import pytest
from django.apps import apps as django_apps
from django.utils import translation

from alerts import events, outbox, services, summaries
from alerts.choices import ChannelKind, Condition, DeliveryStatus, Severity
from alerts.evaluate import Finding, RuleSpec
from alerts.models import Channel, Delivery, Event, Rule
from alerts.sources import metrics
from quotas.interface import set_preferences
from tests import clients
from tests.factories import EventFactory, MembershipFactory, SubscriptionFactory, UserFactory
from tests.tenants import teams_fixture  # noqa: F401 (the teams fixture)
from tests.test_alert_delivery import smtp  # noqa: F401 (the SMTP server fixture)

pytestmark = pytest.mark.django_db

HOT = {"scope": "node:gpu-07 gpu:0", "condition": "temperature_c", "value": 93.0,
       "threshold": 85.0, "comparison": "gt"}  # fmt: skip
# What each language's summary says whatever punctuation its translation gives it (the
# page escapes the ">" of the threshold like any other text).
CHINESE, ENGLISH = "温度 93 °C", "Temperature 93 °C (&gt; 85 °C)"


def rule() -> RuleSpec:
    return RuleSpec(None, "gpu-temperature", "GPU temperature above 85 °C for 5 minutes",
                    Condition.TEMPERATURE, severity=Severity.CRITICAL,
                    renotify_seconds=0)  # fmt: skip


def fire(params: dict, *, key: str = summaries.METRIC, tenant_id: int | None = None,
         fingerprint: str = "fp-hot") -> Event:  # fmt: skip
    what = events.Occurrence(fingerprint, str(params.get("scope", "node:x")),
                             tenant_id=tenant_id, summary_key=key,
                             summary_params=params)  # fmt: skip
    event_id, _again = events.fire(rule(), what)
    return Event.objects.get(pk=event_id)


def pages(client, event: Event, **headers) -> dict[str, str]:
    """The fleet dashboard, the event history, the event's page, the dashboard's strip."""
    urls = ("/", "/alerts/events/", f"/alerts/events/{event.pk}/", "/alerts/events/firing/")
    out = {}
    for url in urls:
        answer = client.get(url, **headers)
        assert answer.status_code == 200, url
        out[url] = answer.content.decode()
    return out


def test_a_chinese_reader_sees_the_summary_in_chinese_with_its_unit(teams):
    event = fire(HOT)
    assert (event.summary_key, event.summary_params["value"]) == (summaries.METRIC, 93.0)
    # Stored in the site's language, whatever language fired it.
    assert event.summary == "node:gpu-07 gpu:0: Temperature 93 °C (> 85 °C)"
    client = clients.page(teams.user("alice"))
    client.cookies["django_language"] = "zh-hans"
    for url, body in pages(client, event).items():
        assert CHINESE in body and "Temperature 93" not in body, url
    client.cookies["django_language"] = "en"
    for url, body in pages(client, event).items():
        assert ENGLISH in body and "温度 93" not in body, url


def test_the_api_summary_is_written_in_the_requests_language(teams):
    event = fire(HOT)
    api = clients.api(teams.user("alice"))
    url = f"/api/v1/alert-events/{event.pk}/"
    chinese = api.get(url, HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert chinese["summary"].startswith("node:gpu-07 gpu:0") and CHINESE in chinese["summary"]
    assert "85 °C" in chinese["summary"] and "Temperature" not in chinese["summary"]
    assert chinese["summary_key"] == summaries.METRIC and chinese["summary_params"] == HOT
    english = api.get(url, HTTP_ACCEPT_LANGUAGE="en").json()
    assert english["summary"] == "node:gpu-07 gpu:0: Temperature 93 °C (> 85 °C)"
    [row] = api.get("/api/v1/alert-events/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()["results"]
    assert row["summary"] == chinese["summary"]


def _mail_channel(user, address: str) -> Channel:
    # A person's own channel with no language of its own: its owner's chosen language.
    channel_id = services.create_channel(
        actor=None, address=None, name=f"mail {address}", kind=ChannelKind.EMAIL,
        settings_values={"address": address}, owner_id=user.pk,
    )  # fmt: skip
    channel = Channel.objects.get(pk=channel_id)
    SubscriptionFactory(owner=user, channel=channel, min_severity=Severity.INFO)
    return channel


def test_an_email_is_written_in_each_subscribers_language(smtp):  # noqa: F811
    chinese, english = UserFactory(), UserFactory()
    set_preferences(chinese, language="zh-hans")
    set_preferences(english, language="en")
    tenant = MembershipFactory(user=chinese).tenant
    MembershipFactory(user=english, tenant=tenant)
    channels = {"zh": _mail_channel(chinese, "zh@example.com"),
                "en": _mail_channel(english, "en@example.com")}  # fmt: skip
    with translation.override("zh-hans"):  # whoever fires it, each reads their own
        fire(HOT, tenant_id=tenant.pk)
    for channel in channels.values():
        [delivery] = Delivery.objects.filter(channel=channel)
        outbox.deliver(delivery.pk)
        delivery.refresh_from_db()
        assert delivery.status == DeliveryStatus.DELIVERED, delivery.last_error
    bodies = {}
    for envelope in smtp.envelopes:
        message = email.message_from_bytes(envelope.content)
        bodies[envelope.rcpt_tos[0]] = message.get_payload(decode=True).decode()
    assert CHINESE in bodies["zh@example.com"] and "85 °C" in bodies["zh@example.com"]
    assert "Temperature" not in bodies["zh@example.com"]
    assert "node:gpu-07 gpu:0: Temperature 93 °C (> 85 °C)" in bodies["en@example.com"]
    assert "温度" not in bodies["en@example.com"]


def test_a_hostile_parameter_is_shown_as_text(teams):
    hostile = {**HOT, "scope": "<script>alert(1)</script> %(value)s"}
    event = fire(hostile)
    client = clients.page(teams.user("alice"))
    client.cookies["django_language"] = "zh-hans"
    for url, body in pages(client, event).items():
        assert "<script>alert(1)" not in body, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt; %(value)s" in body and CHINESE in body, url


@pytest.mark.parametrize(
    "key,params",
    [
        ("no.such.key", HOT),
        (summaries.METRIC, {**HOT, "value": {"not": "a number"}}),
        (summaries.METRIC, {**HOT, "value": "93"}),
        (summaries.METRIC, {**HOT, "condition": "made-up"}),
        (summaries.METRIC, {"scope": "node:x"}),
        (summaries.METRIC, ["not", "an", "object"]),
        (
            summaries.QUOTA_USED,
            {"tenant": "a", "pool": "b", "dimension": "x", "percent": 1, "used": 1, "limit": 1},
        ),
        (
            summaries.RECLAIM_WARNED,
            {"lease": 1, "owner": "o", "pool": "p", "release_after": "tomorrow"},
        ),
    ],
)
def test_a_malformed_summary_shows_the_stored_text(key, params):
    with translation.override("zh-hans"):
        assert summaries.render(key, params, "stored text") == "stored text"


def test_an_event_from_before_summary_keys_shows_its_stored_text(teams):
    old = EventFactory(summary="node:demo-04 gpu:6: 7816 <b>old</b>", tenant=None)
    assert not old.summary_key and not old.summary_params
    client = clients.page(teams.user("alice"))
    client.cookies["django_language"] = "zh-hans"
    for url, body in pages(client, old).items():
        assert "node:demo-04 gpu:6: 7816 &lt;b&gt;old&lt;/b&gt;" in body, url
    answer = clients.api(teams.user("alice")).get(f"/api/v1/alert-events/{old.pk}/")
    assert answer.json()["summary"] == "node:demo-04 gpu:6: 7816 <b>old</b>"


def test_each_cycle_rules_value_has_its_unit():
    topo = metrics.Topology(node_names={1: "demo-04"})
    spec = RuleSpec(1, "process-over-slice", "Process over its slice",
                    Condition.PROCESS_OVER_SLICE)  # fmt: skip
    what = metrics.occurrence(spec, Finding(1, 1, "t", 7816.0), topo)
    with translation.override("zh-hans"):
        chinese = summaries.render(what.summary_key, what.summary_params)
    assert summaries.stored_text(what.summary_key, what.summary_params) == (
        "node:demo-04: Memory used 7816 MiB"
    )
    assert chinese.startswith("node:demo-04") and "已用显存 7816 MiB" in chinese
    expected = {Condition.TEMPERATURE: "92 °C", Condition.MEMORY_USED: "87 %",
                Condition.UTILIZATION: "87 %", Condition.POWER: "87 %",
                Condition.PROCESS_UNALLOCATED: "7816 MiB"}  # fmt: skip
    values = {Condition.TEMPERATURE: 92.0, Condition.PROCESS_UNALLOCATED: 7816.0}
    for condition, shown in expected.items():
        spec = RuleSpec(1, "r", "r", condition, threshold=None)
        what = metrics.occurrence(spec, Finding(1, 1, "t", values.get(condition, 87.0)), topo)
        assert summaries.render(what.summary_key, what.summary_params).endswith(shown)


def test_business_and_reclaim_summaries_are_written_in_the_readers_language():
    quota = {"tenant": "acme", "pool": "a100", "dimension": "memory_mib", "percent": 93.3,
             "used": 15000.0, "limit": 16384.0}  # fmt: skip
    reclaim = {"lease": 3, "owner": "bob", "pool": "A100s",
               "release_after": "2026-12-04T10:00:00+00:00"}  # fmt: skip
    with translation.override("en"):
        assert summaries.render(summaries.QUOTA_USED, quota) == (
            "acme in a100: 93 % of memory (MiB) used (15000 of 16384)"
        )
    with translation.override("zh-hans"):
        assert "显存" in summaries.render(summaries.QUOTA_USED, quota)
        assert "租用 #3" in summaries.render(summaries.RECLAIM_WARNED, reclaim)
        pending = {"request": 5, "requester": "bob", "hours": 4.25}
        assert "bob" in summaries.render(summaries.REQUEST_PENDING, pending)


def test_the_migration_gives_old_events_of_known_shapes_their_keys(teams):
    fill = importlib.import_module("alerts.migrations.0006_event_summary_keys")
    rules = {key: Rule.objects.get(key=key) for key in
             ("gpu-temperature", "gpu-lost", "request-pending", "quota-used")}  # fmt: skip
    old = {
        "hot": ("gpu-temperature", "node:n1 gpu:3", {"value": "93"},
                "node:n1 gpu:3: 93 °C (> 85 °C)"),
        "lost": ("gpu-lost", "node:n1 gpu:2", {}, "node:n1 gpu:2: GPU lost (fallen off the bus)"),
        "pending": ("request-pending", "tenant:acme request:5", {},
                    "request 5 by bob pending 4.2 h"),
        "quota": ("quota-used", "tenant:acme pool:p", {},
                  "acme in p: 93 % of memory MiB used (15000 of 16384)"),
        "odd": ("gpu-temperature", "node:n1 gpu:4", {"value": "93"}, "someone's own words"),
    }  # fmt: skip
    made = {
        name: EventFactory(rule=rules[key], rule_key=key, scope=scope, labels=labels,
                           summary=text)
        for name, (key, scope, labels, text) in old.items()
    }  # fmt: skip
    fill.fill_summary_keys(django_apps, None)
    with translation.override("zh-hans"):
        shown = {name: Event.objects.get(pk=e.pk).summary_text for name, e in made.items()}
        lost = str(Condition.GPU_LOST.label)
        pending = summaries.render(summaries.REQUEST_PENDING,
                                   {"request": 5, "requester": "bob", "hours": 4.2})  # fmt: skip
    assert shown["hot"].startswith("node:n1 gpu:3") and "温度 93 °C" in shown["hot"]
    assert "85 °C" in shown["hot"]
    assert shown["lost"].startswith("node:n1 gpu:2") and shown["lost"].endswith(lost)
    assert "GPU lost" not in lost
    assert shown["pending"] == pending and "bob" in pending
    assert "显存" in shown["quota"] and "16384" in shown["quota"]
    assert shown["odd"] == "someone's own words"
    assert not Event.objects.get(pk=made["odd"].pk).summary_key
