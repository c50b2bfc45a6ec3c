"""The Alertmanager receiver and the rules, subscriptions and events API: who may do
what, and bad input refused with nothing changed."""

from __future__ import annotations

import pytest

from alerts.models import Event, Rule, Subscription
from alerts.sources import metrics
from audit.models import AuditEntry
from tests import clients
from tests.api import error_fields
from tests.factories import (
    ChannelFactory,
    EventFactory,
    MembershipFactory,
    SubscriptionFactory,
    TenantFactory,
)

URL = "/api/v1/alertmanager/"
TOKEN = "am-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def _token(settings):
    settings.ALERTMANAGER_TOKEN = TOKEN
    metrics.forget_caches()


def am(alerts: list[dict], status: str = "firing") -> dict:
    return {"version": "4", "groupKey": "{}:{}", "status": status, "receiver": "portal",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "alerts": alerts}  # fmt: skip


def alert(status: str = "firing", **labels) -> dict:
    return {"status": status, "fingerprint": "c0ffee",
            "labels": {"alertname": "GpuHot", "Hostname": "gpu-03", "severity": "critical",
                       **labels},
            "annotations": {"summary": "GPU 2 at 93 °C"},
            "startsAt": "2026-12-01T03:00:00Z", "endsAt": "0001-01-01T00:00:00Z"}  # fmt: skip


def post(body, token: str | None = TOKEN, **extra):
    client = clients.bearer(token) if token else clients.api()
    return client.post(URL, body, format="json", **extra)


def test_without_the_token_the_receiver_answers_401_and_changes_nothing(db):
    for token in (None, "wrong-token"):
        response = post(am([alert()]), token=token)
        assert response.status_code == 401 and "Bearer" in response["WWW-Authenticate"]
    assert not Event.objects.exists()


def test_with_no_token_configured_the_receiver_is_off(db, settings):
    settings.ALERTMANAGER_TOKEN = ""
    assert post(am([alert()]), token="").status_code == 401


@pytest.mark.parametrize("body", [
    [], {"alerts": "x"}, {"alerts": [{"status": "burning", "labels": {"alertname": "A"}}]},
    {"alerts": [alert(), {"status": "firing", "labels": {"alertname": 5}}]},
    {"alerts": [{"status": "firing", "labels": {}}]},
    {"alerts": [alert(), {"status": "firing", "labels": {"alertname": "x" * 5000}}]},
])  # fmt: skip
def test_a_malformed_message_is_400_and_changes_nothing(db, body):
    response = post(body)
    assert response.status_code == 400, response.content
    assert not Event.objects.exists()


def test_a_body_that_is_not_json_is_400(db):
    response = clients.bearer(TOKEN).post(URL, b"{nope", content_type="application/json")
    assert response.status_code == 400 and not Event.objects.exists()


def test_alerts_become_events_and_resolve(db, alice):
    sub = SubscriptionFactory(owner=alice)
    response = post(am([alert()]))
    assert response.status_code == 200 and response.json()["firing"] == 1
    event = Event.objects.get()
    assert (event.rule_key, event.rule_name, event.severity) == ("alertmanager", "GpuHot",
                                                                 "critical")  # fmt: skip
    assert event.labels["node"] == "gpu-03" and event.summary == "GPU 2 at 93 °C"
    post(am([alert()]))  # sent again while firing: the same event
    assert Event.objects.count() == 1
    assert post(am([alert("resolved")], "resolved")).json()["resolved"] == 1
    event.refresh_from_db()
    assert event.state == "resolved"
    assert sub.channel.deliveries.count() == 2  # firing, then resolved


def test_a_tenant_label_makes_it_that_tenants_event(db):
    red = TenantFactory(slug="red")
    post(am([alert(tenant="red")]))
    assert Event.objects.get().tenant_id == red.pk
    post(am([{**alert(tenant="nobody"), "fingerprint": "other"}]))
    assert Event.objects.get(tenant__isnull=True)


# --- rules, subscriptions, events in the API ------------------------------------------------


def test_everyone_reads_rules_only_the_platform_admin_changes_them(db, alice, bob):
    rule = Rule.objects.get(key="gpu-temperature")
    assert clients.api(bob).get("/api/v1/alert-rules/").status_code == 200
    assert clients.api(bob).patch(f"/api/v1/alert-rules/{rule.pk}/", {"threshold": 70},
                                 format="json").status_code == 403  # fmt: skip
    response = clients.api(alice).patch(f"/api/v1/alert-rules/{rule.pk}/", {"threshold": 80},
                                       format="json")  # fmt: skip
    assert response.status_code == 200 and response.json()["threshold"] == 80
    assert AuditEntry.objects.filter(action="alerts.rule.update").exists()


@pytest.mark.parametrize("data", [
    {"threshold": 1e9}, {"threshold": "hot"}, {"severity": "loud"}, {"for_seconds": -1},
    {"scope_kind": "pool", "scope_id": 999999}, {"name": ""},
])  # fmt: skip
def test_bad_rule_input_is_400_and_changes_nothing(db, alice, data):
    rule = Rule.objects.get(key="gpu-temperature")
    response = clients.api(alice).patch(f"/api/v1/alert-rules/{rule.pk}/", data, format="json")
    assert response.status_code == 400, response.content
    after = Rule.objects.get(pk=rule.pk)
    assert (after.threshold, after.severity, after.for_seconds, after.name, after.scope_kind) == (
        rule.threshold, rule.severity, rule.for_seconds, rule.name, rule.scope_kind)  # fmt: skip


def test_a_new_rule_is_created_and_a_built_in_one_is_not_deleted(db, alice):
    client = clients.api(alice)
    response = client.post("/api/v1/alert-rules/", {
        "name": "Hot in the lab", "condition": "temperature_c", "threshold": 75,
        "for_seconds": 60, "severity": "warning"}, format="json")  # fmt: skip
    assert response.status_code == 201, response.content
    assert response.json()["key"] == "hot-in-the-lab"
    builtin = Rule.objects.get(key="gpu-lost")
    assert client.delete(f"/api/v1/alert-rules/{builtin.pk}/").status_code == 400
    assert client.delete(f"/api/v1/alert-rules/{response.json()['id']}/").status_code == 204


def test_subscriptions_are_their_owners_own(db, alice, bob, carol):
    channel = ChannelFactory(owner=bob)
    response = clients.api(bob).post("/api/v1/alert-subscriptions/", {
        "channel": channel.pk, "min_severity": "info", "quiet_start": "22:00",
        "quiet_end": "07:00"}, format="json")  # fmt: skip
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    assert clients.api(carol).get(f"/api/v1/alert-subscriptions/{pk}/").status_code == 404
    assert clients.api(alice).get(f"/api/v1/alert-subscriptions/{pk}/").status_code == 200
    # Someone else's channel is not yours to subscribe.
    response = clients.api(carol).post("/api/v1/alert-subscriptions/", {"channel": channel.pk},
                                      format="json")  # fmt: skip
    assert response.status_code == 400 and "channel" in error_fields(response)
    assert Subscription.objects.count() == 1


def test_only_a_tenants_admin_subscribes_for_the_tenant(db, bob):
    tenant = TenantFactory()
    MembershipFactory(tenant=tenant, user=bob)  # a member, not an admin
    channel = ChannelFactory(owner=None, tenant=tenant)
    response = clients.api(bob).post("/api/v1/alert-subscriptions/", {
        "channel": channel.pk, "tenant": tenant.pk}, format="json")  # fmt: skip
    assert response.status_code == 400 and not Subscription.objects.exists()


def test_events_are_seen_as_routing_sends_them_and_acknowledged_by_who_answers(
    db, alice, bob, carol
):
    red = TenantFactory()
    MembershipFactory(tenant=red, user=bob)
    platform, red_event, other = EventFactory(), EventFactory(tenant=red), EventFactory(
        tenant=TenantFactory())  # fmt: skip
    seen = {who.username: {e["id"] for e in clients.api(who).get(
        "/api/v1/alert-events/").json()["results"]} for who in (alice, bob, carol)}  # fmt: skip
    assert seen == {"alice": {platform.pk, red_event.pk, other.pk}, "bob": {red_event.pk},
                    "carol": {platform.pk}}  # fmt: skip
    # A member sees the tenant's event but does not answer for it.
    assert clients.api(bob).post(f"/api/v1/alert-events/{red_event.pk}/acknowledge/"
                                ).status_code == 403  # fmt: skip
    response = clients.api(carol).post(f"/api/v1/alert-events/{platform.pk}/acknowledge/")
    assert response.status_code == 200 and response.json()["state"] == "acknowledged"
    assert clients.api(carol).post(f"/api/v1/alert-events/{other.pk}/acknowledge/"
                                  ).status_code == 404  # fmt: skip
    assert AuditEntry.objects.filter(action="alerts.event.acknowledge").count() == 1
