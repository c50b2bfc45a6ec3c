"""Subscriptions route events to channels: tenant isolation on both sides, severities,
rules, scopes, quiet hours; business rules by beat; GPU request notices through alerts."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest
from django.utils import timezone

from alerts import events, recipients, rules
from alerts.choices import ScopeKind, Severity
from alerts.evaluate import RuleSpec
from alerts.models import Delivery, Event, Rule
from alerts.sources import business, metrics, request_notices
from quotas.choices import NoticeKind
from quotas.models import GpuRequest
from quotas.requests import services as quota_services
from tests.factories import (
    ChannelFactory,
    MembershipFactory,
    SubscriptionFactory,
    TenantFactory,
    UserFactory,
    gpu_team,
)


@pytest.fixture(autouse=True)
def _fresh_caches():
    metrics.forget_caches()
    yield
    metrics.forget_caches()


def spec(key: str = "gpu-temperature", **kw) -> RuleSpec:
    return rules.spec_of(Rule.objects.get(key=key)) if not kw else RuleSpec(
        Rule.objects.get(key=key).pk, key, key, "temperature_c", **kw)  # fmt: skip


def fire(tenant_id=None, labels=None, key="gpu-temperature", fp="fp-1", **kw) -> int:
    what = events.Occurrence(fingerprint=fp, scope="node:gpu-01", summary="hot",
                             labels=labels or {"node": "gpu-01"}, tenant_id=tenant_id)  # fmt: skip
    event_id, _again = events.fire(spec(key, **kw), what)
    return event_id


def sent_to(channel) -> int:
    return Delivery.objects.filter(channel=channel).count()


def test_a_member_never_receives_another_tenants_events(db):
    red, blue = TenantFactory(), TenantFactory()
    bob = MembershipFactory(tenant=red).user
    mine = SubscriptionFactory(owner=bob, min_severity=Severity.INFO)
    red_channel = SubscriptionFactory(owner=None, tenant=red, min_severity=Severity.INFO)
    blue_channel = SubscriptionFactory(owner=None, tenant=blue, min_severity=Severity.INFO)
    fire(tenant_id=blue.pk, fp="blue")
    assert sent_to(mine.channel) == 0 and sent_to(red_channel.channel) == 0
    assert sent_to(blue_channel.channel) == 1
    fire(tenant_id=red.pk, fp="red")
    assert sent_to(mine.channel) == 1 and sent_to(red_channel.channel) == 1
    assert sent_to(blue_channel.channel) == 1


def test_a_member_removed_from_the_tenant_stops_receiving_its_events(db):
    red = TenantFactory()
    membership = MembershipFactory(tenant=red)
    sub = SubscriptionFactory(owner=membership.user)
    membership.delete()
    fire(tenant_id=red.pk)
    assert sent_to(sub.channel) == 0


def test_platform_events_go_to_platform_admins_and_operators_only(db, alice, bob, carol):
    subs = {who.username: SubscriptionFactory(owner=who) for who in (alice, bob, carol)}
    tenant_sub = SubscriptionFactory(owner=None, tenant=TenantFactory())
    fire(tenant_id=None)
    assert {name: sent_to(s.channel) for name, s in subs.items()} == {
        "alice": 1, "bob": 0, "carol": 1}  # fmt: skip
    assert sent_to(tenant_sub.channel) == 0


def test_a_subscription_picks_rules_severities_and_scopes(db, alice):
    hot = Rule.objects.get(key="gpu-temperature")
    only_lost = SubscriptionFactory(owner=alice)
    only_lost.rules.set([Rule.objects.get(key="gpu-lost")])
    only_hot = SubscriptionFactory(owner=alice)
    only_hot.rules.set([hot])
    critical_only = SubscriptionFactory(owner=alice, min_severity=Severity.CRITICAL)
    other_node = SubscriptionFactory(owner=alice, scope_kind=ScopeKind.NODE, scope_name="gpu-99")
    this_node = SubscriptionFactory(owner=alice, scope_kind=ScopeKind.NODE, scope_name="gpu-01")
    fire(tenant_id=None)  # critical, node gpu-01
    got = [sent_to(s.channel) for s in (only_lost, only_hot, critical_only, other_node, this_node)]
    assert got == [0, 1, 1, 0, 1]
    fire(tenant_id=None, fp="fp-warn", severity=Severity.WARNING)
    assert sent_to(critical_only.channel) == 1 and sent_to(this_node.channel) == 2


def test_two_subscriptions_to_one_channel_send_one_message(db, alice):
    channel = ChannelFactory(owner=alice)
    SubscriptionFactory(owner=alice, channel=channel)
    SubscriptionFactory(owner=alice, channel=channel, min_severity=Severity.INFO)
    fire()
    assert sent_to(channel) == 1


def test_quiet_hours_hold_a_warning_until_they_end_but_not_a_critical(db, alice, settings):
    settings.TIME_ZONE = "UTC"
    now = timezone.now()
    start = (now - timedelta(hours=1)).time().replace(second=0, microsecond=0)
    end = (now + timedelta(hours=2)).time().replace(second=0, microsecond=0)
    sub = SubscriptionFactory(owner=alice, quiet_start=start, quiet_end=end)
    fire(fp="warn", severity=Severity.WARNING)
    held = Delivery.objects.get(channel=sub.channel)
    assert held.next_attempt_at > now + timedelta(hours=1, minutes=55)
    fire(fp="crit")  # the default rule is critical
    assert Delivery.objects.filter(channel=sub.channel, next_attempt_at__lte=now +
                                   timedelta(seconds=5)).count() == 1  # fmt: skip


def test_quiet_hours_over_midnight():
    at = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
    with timezone.override("UTC"):
        until = recipients.quiet_until(time(22), time(7), at)
        assert until == datetime(2026, 12, 2, 7, 0, tzinfo=UTC)
        assert recipients.quiet_until(time(22), time(7), at.replace(hour=12)) is None
        assert recipients.quiet_until(time(1), time(5), at.replace(hour=3)).hour == 5


def test_a_request_pending_for_hours_is_an_event_of_its_tenant(db):
    team = gpu_team()
    outsider = SubscriptionFactory(owner=MembershipFactory().user, min_severity=Severity.INFO)
    admin_sub = SubscriptionFactory(owner=team.admin, min_severity=Severity.INFO)
    request_id = quota_services.create_request(team.dev, **team.ask()).pk
    GpuRequest.objects.filter(pk=request_id).update(created=timezone.now() - timedelta(hours=5))
    assert business.evaluate_business() >= 1
    event = Event.objects.get(rule_key="request-pending")
    assert event.tenant_id == team.tenant.pk and event.labels["request"] == str(request_id)
    assert sent_to(admin_sub.channel) == 1 and sent_to(outsider.channel) == 0
    GpuRequest.objects.filter(pk=request_id).update(state="cancelled")
    business.evaluate_business()
    event.refresh_from_db()
    assert event.state == "resolved"


def test_a_quota_nearly_used_up_is_an_event_of_its_tenant(db):
    from tests.factories import held_allocation

    team = gpu_team(limit_vgpus=2, guaranteed_vgpus=1)
    held_allocation(team.tenant, team.pool, team.dev, timezone.now() - timedelta(hours=1))
    held_allocation(team.tenant, team.pool, team.dev, timezone.now() - timedelta(hours=1))
    business.evaluate_business()
    event = Event.objects.get(rule_key="quota-used", labels__dimension="vgpus")
    assert event.tenant_id == team.tenant.pk and "100 %" in event.summary


def test_request_notices_reach_the_people_concerned_on_their_own_channels(db):
    team = gpu_team()
    dev_sub = SubscriptionFactory(owner=team.dev, min_severity=Severity.INFO)
    tenant_sub = SubscriptionFactory(owner=None, tenant=team.tenant, min_severity=Severity.INFO)
    other = SubscriptionFactory(owner=UserFactory(), min_severity=Severity.INFO)
    ids = request_notices.deliver_notice(request_id=7, kind=NoticeKind.APPROVED,
                                 recipient_ids=[team.dev.pk], comment="ok")  # fmt: skip
    [delivery] = Delivery.objects.filter(pk__in=ids)
    assert delivery.channel_id == dev_sub.channel_id and delivery.notice["kind"] == "approved"
    assert sent_to(tenant_sub.channel) == 0 and sent_to(other.channel) == 0


def test_the_request_signal_turns_into_notices(db, django_capture_on_commit_callbacks, eager_tasks):
    team = gpu_team()
    dev_sub = SubscriptionFactory(owner=team.dev, min_severity=Severity.INFO)
    req = quota_services.create_request(team.dev, **team.ask())
    with django_capture_on_commit_callbacks(execute=True):
        quota_services.decide(req.pk, team.approver, approve=True, comment="go")
    notices = [d.notice for d in Delivery.objects.filter(channel=dev_sub.channel)]
    assert {"kind": "approved", "request": req.pk, "comment": "go", "severity": "info"} in notices


def test_a_notice_is_written_in_its_channels_language(db):
    from alerts.messages import render

    team = gpu_team()
    channel = ChannelFactory(owner=team.dev, language="zh-hans")
    SubscriptionFactory(owner=team.dev, channel=channel, min_severity=Severity.INFO)
    [pk] = request_notices.deliver_notice(request_id=3, kind=NoticeKind.APPROVED,
                                  recipient_ids=[team.dev.pk])  # fmt: skip
    message = render(Delivery.objects.select_related("channel").get(pk=pk))
    assert "#3" in message.title and message.summary != "Your request was approved."


def test_disabling_the_notice_rule_stops_notices(db):
    team = gpu_team()
    SubscriptionFactory(owner=team.dev, min_severity=Severity.INFO)
    Rule.objects.filter(key="request-notices").update(enabled=False)
    ids = [team.dev.pk]
    assert request_notices.deliver_notice(request_id=1, kind="approved", recipient_ids=ids) == []
