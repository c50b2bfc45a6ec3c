"""Reports' news delivered through alerts: a reclaim warning is an event of the
reclaim-warning rule (firing while the warning is open); each reclaim step is a notice to
the lease's owner and the tenant's admins; the daily idle digest goes to platform admins
(every tenant) and tenant admins (their own), each in their channel's language, through
the outbox to a real SMTP server, and with a real Celery worker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from alerts import outbox, rules, services
from alerts.choices import ChannelKind, DeliveryStatus, EventState, Severity
from alerts.models import Channel, Delivery, Event, Rule
from alerts.sources import business, metrics
from quotas.choices import Role
from reports.choices import WarningState
from reports.interface import appeal_event, idle_digest, reclaim_warned, reclaimed
from reports.models import ReclaimWarning
from tests import procs
from tests.factories import (
    MembershipFactory,
    SubscriptionFactory,
    gpu_team,
    held_allocation,
)
from tests.test_alert_delivery import smtp, wait_until, worker_env  # noqa: F401 (fixtures)


@pytest.fixture(autouse=True)
def _fresh_caches():
    metrics.forget_caches()
    yield
    metrics.forget_caches()


def email_channel(user, address: str, language: str = "", rules=(), tenant=None):
    channel_id = services.create_channel(
        actor=None, address=None, name=f"mail {address}", kind=ChannelKind.EMAIL,
        settings_values={"address": address}, owner_id=None if tenant else user.pk,
        tenant_id=tenant.pk if tenant else None, language=language,
    )  # fmt: skip
    sub = SubscriptionFactory(
        owner=None if tenant else user, tenant=tenant, channel=Channel.objects.get(pk=channel_id),
        min_severity=Severity.INFO,
    )  # fmt: skip
    sub.rules.set(Rule.objects.filter(key__in=rules))
    return channel_id


@pytest.fixture
def warned(db):
    """Acme's developer holds an idle lease; a warning says it goes in a day."""
    team = gpu_team("acme")
    allocation = held_allocation(team.tenant, team.pool, team.dev, timezone.now())
    warning = ReclaimWarning.objects.create(
        lease=allocation.lease, tenant_id=team.tenant.pk, warned_at=timezone.now(),
        release_after=timezone.now() + timedelta(hours=24),
    )  # fmt: skip
    return team, warning


def facts(warning: ReclaimWarning) -> dict:
    return {"warning_id": warning.pk, "lease_id": warning.lease_id,
            "tenant_id": warning.tenant_id, "holder_id": warning.lease.holder_id}  # fmt: skip


def send_all(channel_id: int) -> list[Delivery]:
    rows = list(Delivery.objects.filter(channel_id=channel_id).order_by("pk"))
    for row in rows:
        outbox.deliver(row.pk)
        row.refresh_from_db()
    return rows


def test_a_reclaim_warning_fires_the_rules_event_for_the_tenant_until_it_ends(warned):
    team, warning = warned
    reclaim_warned.send(sender=ReclaimWarning, release_after=warning.release_after,
                        **facts(warning))  # fmt: skip
    event = Event.objects.get(rule_key="reclaim-warning")
    assert event.state == EventState.FIRING and event.tenant_id == team.tenant.pk
    assert event.labels["lease"] == str(warning.lease_id) and "acme" in event.scope
    # Warned again (the scan's next pass): still one event.
    reclaim_warned.send(sender=ReclaimWarning, release_after=warning.release_after,
                        **facts(warning))  # fmt: skip
    assert Event.objects.filter(rule_key="reclaim-warning").count() == 1
    ReclaimWarning.objects.filter(pk=warning.pk).update(state=WarningState.RELEASED)
    reclaimed.send(sender=ReclaimWarning, **facts(warning))
    event.refresh_from_db()
    assert event.state == EventState.RESOLVED


def test_a_withdrawn_warning_resolves_its_event_at_the_next_business_pass(warned):
    _team, warning = warned
    reclaim_warned.send(sender=ReclaimWarning, release_after=warning.release_after,
                        **facts(warning))  # fmt: skip
    business.evaluate_business()
    assert Event.objects.get(rule_key="reclaim-warning").state == EventState.FIRING
    ReclaimWarning.objects.filter(pk=warning.pk).update(state=WarningState.WITHDRAWN)
    business.evaluate_business()
    assert Event.objects.get(rule_key="reclaim-warning").state == EventState.RESOLVED


def test_an_open_warning_without_its_signal_is_raised_by_the_business_pass(warned):
    business.evaluate_business()
    assert Event.objects.filter(rule_key="reclaim-warning", state=EventState.FIRING).count() == 1


def test_a_disabled_reclaim_rule_raises_nothing(warned):
    _team, warning = warned
    Rule.objects.filter(key="reclaim-warning").update(enabled=False)
    rules.bump_rules_version()
    reclaim_warned.send(sender=ReclaimWarning, release_after=warning.release_after,
                        **facts(warning))  # fmt: skip
    assert not Event.objects.filter(rule_key="reclaim-warning").exists()


def test_reclaim_notices_reach_the_owner_and_the_tenants_admins_in_their_languages(
    warned,
    smtp,  # noqa: F811
):
    team, warning = warned
    outsider = MembershipFactory(role=Role.ADMIN).user  # another tenant's admin
    owner_ch = email_channel(team.dev, "dev@example.com", rules=["reclaim-notices"])
    admin_ch = email_channel(team.admin, "admin@example.com", "zh-hans", ["reclaim-notices"])
    approver_ch = email_channel(team.approver, "approver@example.com", rules=["reclaim-notices"])
    outsider_ch = email_channel(outsider, "outsider@example.com", rules=["reclaim-notices"])
    reclaim_warned.send(sender=ReclaimWarning, release_after=warning.release_after,
                        **facts(warning))  # fmt: skip
    for channel_id in (owner_ch, admin_ch):
        [delivery] = send_all(channel_id)
        assert delivery.status == DeliveryStatus.DELIVERED, delivery.last_error
    assert not Delivery.objects.filter(channel_id__in=[approver_ch, outsider_ch]).exists()
    by_address = {e.rcpt_tos[0]: e.content.decode() for e in smtp.envelopes}
    english = by_address["dev@example.com"]
    assert f"Idle GPUs to be taken back: lease #{warning.lease_id}" in english
    chinese = by_address["admin@example.com"]
    assert f"#{warning.lease_id}" in chinese and "Idle GPUs to be taken back" not in chinese
    # The appeal's decision and the reclaim follow the same way.
    appeal_event.send(sender=ReclaimWarning, decided=True, granted=False, **facts(warning))
    reclaimed.send(sender=ReclaimWarning, **facts(warning))
    rows = send_all(owner_ch)
    assert [row.notice["kind"] for row in rows] == ["warned", "refused", "reclaimed"]
    assert all(row.status == DeliveryStatus.DELIVERED for row in rows)


def test_a_disabled_notice_rule_sends_no_reclaim_notice(warned):
    team, warning = warned
    owner_ch = email_channel(team.dev, "dev@example.com", rules=["reclaim-notices"])
    Rule.objects.filter(key="reclaim-notices").update(enabled=False)
    reclaimed.send(sender=ReclaimWarning, **facts(warning))
    assert not Delivery.objects.filter(channel_id=owner_ch).exists()


def digest_of(*tenants) -> dict:
    return {
        "day": "2026-12-01",
        "tenants": [
            {"tenant_id": t.pk, "tenant": t.name, "count": 1, "wasted_gpu_hours": 3.5,
             "allocations": [{"allocation_id": 10 + i, "pool": "pool", "owner": f"u{i}",
                              "idle_hours": 3.5, "wasted_gpu_hours": 3.5}]}
            for i, t in enumerate(tenants)
        ],
        "idle_cards": 2,
    }  # fmt: skip


def test_the_digest_goes_to_platform_admins_whole_and_to_tenant_admins_their_part(
    db,
    smtp,  # noqa: F811
    alice,
):
    acme, bravo = gpu_team("acme"), gpu_team("bravo-secret")
    alice_ch = email_channel(alice, "alice@example.com", rules=["idle-digest"])
    acme_ch = email_channel(acme.admin, "acme@example.com", "zh-hans", ["idle-digest"])
    dev_ch = email_channel(acme.dev, "dev@example.com", rules=["idle-digest"])
    unsubscribed = email_channel(bravo.admin, "bravo@example.com", rules=["request-notices"])
    who = frozenset({alice.pk, acme.admin.pk, bravo.admin.pk})
    idle_digest.send(sender=None, day="2026-12-01", recipient_ids=who,
                     digest=digest_of(acme.tenant, bravo.tenant))  # fmt: skip
    for channel_id in (alice_ch, acme_ch):
        [delivery] = send_all(channel_id)
        assert delivery.status == DeliveryStatus.DELIVERED, delivery.last_error
    assert not Delivery.objects.filter(channel_id__in=[dev_ch, unsubscribed]).exists()
    mail = {e.rcpt_tos[0]: e.content.decode() for e in smtp.envelopes}
    assert "bravo-secret" in mail["alice@example.com"] and "acme" in mail["alice@example.com"]
    assert "Idle GPUs on 2026-12-01" in mail["alice@example.com"]
    assert "bravo-secret" not in mail["acme@example.com"]
    assert "Idle GPUs on" not in mail["acme@example.com"]  # written in Chinese


def test_a_digest_with_nothing_of_a_tenant_admins_tenants_sends_them_nothing(db):
    acme, bravo = gpu_team("acme"), gpu_team("bravo")
    acme_ch = email_channel(acme.admin, "acme@example.com", rules=["idle-digest"])
    idle_digest.send(sender=None, day="2026-12-01", recipient_ids=frozenset({acme.admin.pk}),
                     digest=digest_of(bravo.tenant))  # fmt: skip
    assert not Delivery.objects.filter(channel_id=acme_ch).exists()


def test_a_real_worker_delivers_the_digest_through_smtp(
    worker_env,  # noqa: F811
    smtp,  # noqa: F811
    alice,
):
    env = {**worker_env, "EMAIL_HOST": "127.0.0.1", "EMAIL_PORT": str(settings.EMAIL_PORT)}
    worker = procs.start_celery_worker(env, "alerts-digest")
    try:
        acme = gpu_team("acme")
        alice_ch = email_channel(alice, "alice@example.com", rules=["idle-digest"])
        idle_digest.send(sender=None, day="2026-12-01", recipient_ids=frozenset({alice.pk}),
                         digest=digest_of(acme.tenant))  # fmt: skip
        wait_until(lambda: Delivery.objects.filter(
            channel_id=alice_ch, status=DeliveryStatus.DELIVERED).exists())  # fmt: skip
    finally:
        worker.stop()
    [envelope] = smtp.envelopes
    assert envelope.rcpt_tos == ["alice@example.com"]
    assert "Idle GPUs on 2026-12-01" in envelope.content.decode()
