"""Deliveries reach real receivers: an SMTP server and each IM vendor's endpoint on
loopback, which check payloads and signatures as the vendors do; errors are retried or
disable the channel; a receiver that is down, then back, loses nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller
from django.utils import timezone

from alerts import events, outbox, services
from alerts.choices import ChannelKind, Condition, DeliveryStatus, EventState, Severity
from alerts.evaluate import RuleSpec
from alerts.models import Channel, Delivery, Event
from tests import procs
from tests.alert_receivers import PATHS, SECRET, Receiver, handler_for, serve_on
from tests.factories import EventFactory, MembershipFactory, SubscriptionFactory, UserFactory


@pytest.fixture
def loopback_allowed(settings) -> None:
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]


@pytest.fixture
def receiver(loopback_allowed) -> Iterator[tuple[str, Receiver]]:
    rx = Receiver()
    url, server = procs.serve(handler_for(rx))
    yield url, rx
    if rx.hold is not None:
        rx.hold.set()
    server.shutdown()
    server.server_close()


class _Inbox:
    def __init__(self) -> None:
        self.envelopes: list = []

    async def handle_DATA(self, server, session, envelope):
        self.envelopes.append(envelope)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("nobody@"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"


@pytest.fixture
def smtp(settings) -> Iterator[_Inbox]:
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=procs.free_port())
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", controller.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    yield inbox
    controller.stop()


def channel(kind: str, url: str = "", secret: str = "", **values) -> Channel:
    if kind != ChannelKind.EMAIL:
        values["url"] = url + PATHS[kind]
        if kind in ("dingtalk", "feishu", "webhook"):
            values["secret"] = secret or SECRET
    channel_id = services.create_channel(
        actor=None, address=None, name=f"{kind} channel", kind=kind, settings_values=values,
        owner_id=UserFactory().pk,
    )  # fmt: skip
    return Channel.objects.get(pk=channel_id)


def rule(name: str = "R") -> RuleSpec:
    return RuleSpec(None, "r", name, Condition.TEMPERATURE, severity=Severity.WARNING,
                    renotify_seconds=0)  # fmt: skip


def fire_to(ch: Channel, name: str) -> int:
    """Fire an event as the rules do (``alerts.events``), in a tenant of the channel's
    owner who subscribed the channel: routing queues its one delivery, whose id this is."""
    tenant = MembershipFactory(user=ch.owner).tenant
    SubscriptionFactory(owner=ch.owner, channel=ch, min_severity=Severity.INFO)
    what = events.Occurrence(fingerprint=f"fp-{name}", scope=f"tenant:{tenant.slug}",
                             summary=name, tenant_id=tenant.pk)  # fmt: skip
    events.fire(rule(name), what)
    [delivery_id] = Delivery.objects.filter(channel=ch).values_list("pk", flat=True)
    return delivery_id


def deliver_one(ch: Channel, event: Event | None = None) -> Delivery:
    event = event or EventFactory()
    delivery = Delivery.objects.create(channel=ch, event=event, next_attempt_at=timezone.now())
    outbox.deliver(delivery.pk)
    delivery.refresh_from_db()
    return delivery


def test_an_email_channel_sends_through_a_real_smtp_server(db, smtp):
    ch = channel(ChannelKind.EMAIL, address="oncall@example.com")
    delivery = deliver_one(ch)
    assert delivery.status == DeliveryStatus.DELIVERED, delivery.last_error
    [envelope] = smtp.envelopes
    assert envelope.rcpt_tos == ["oncall@example.com"]
    text = envelope.content.decode()
    assert "Subject: [CRITICAL] Firing: GPU too hot" in text
    assert "GPU 0 is at 91" in text
    [attempt] = delivery.attempt_log.all()
    assert attempt.ok and attempt.number == 1


def test_a_recipient_the_mail_server_refuses_disables_the_channel(db, smtp):
    ch = channel(ChannelKind.EMAIL, address="nobody@example.com")
    delivery = deliver_one(ch)
    ch.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED
    assert not ch.enabled and "550" in ch.disabled_reason


def test_a_mail_server_that_is_down_is_retried(db, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", procs.free_port()
    ch = channel(ChannelKind.EMAIL, address="oncall@example.com")
    delivery = deliver_one(ch)
    ch.refresh_from_db()
    assert delivery.status == DeliveryStatus.PENDING and delivery.attempts == 1
    assert delivery.next_attempt_at > timezone.now() and ch.enabled


@pytest.mark.parametrize("kind", ["dingtalk", "feishu", "wecom", "slack", "webhook"])
def test_each_vendor_receives_its_own_payload_signed_as_it_checks(db, receiver, kind):
    url, rx = receiver
    delivery = deliver_one(channel(kind, url))
    assert delivery.status == DeliveryStatus.DELIVERED, delivery.last_error
    [got] = rx.received
    assert got.vendor == kind
    text = got.body.decode()
    assert "GPU too hot" in text and "node:gpu-" in text


HOSTILE = "See [the fix](http://evil.example/x) **now** <!channel>\n# pwned"


@pytest.mark.parametrize("kind", ["dingtalk", "feishu", "wecom"])
def test_a_summary_with_markdown_reaches_im_as_text_not_markup(db, receiver, kind):
    # Alertmanager's summaries and agents' labels come from outside the portal.
    url, rx = receiver
    event = EventFactory(summary=HOSTILE, rule_name="R_1 *x*")
    assert deliver_one(channel(kind, url), event).status == DeliveryStatus.DELIVERED
    [got] = rx.received
    text = got.body.decode("unicode_escape")
    assert r"\[the fix\](http://evil.example/x)" in text and r"\*\*now\*\*" in text
    assert r"\<!channel\>" in text and "\\# pwned" in text
    # Feishu's card shows the title in its header, as plain text.
    assert (r"R\_1 \*x\*" if kind != "feishu" else "R_1 *x*") in text
    assert "[the fix](" not in text.replace("\\[the fix\\](", "")


def test_a_summary_with_mrkdwn_reaches_slack_as_text(db, receiver):
    url, rx = receiver
    event = EventFactory(summary="<!channel> <http://evil.example|click> & co")
    assert deliver_one(channel("slack", url), event).status == DeliveryStatus.DELIVERED
    [got] = rx.received
    blocks = got.json()["blocks"][0]["text"]["text"]
    assert "&lt;!channel&gt; &lt;http://evil.example|click&gt; &amp; co" in blocks
    assert "<!channel>" not in got.body.decode()


def test_the_webhook_carries_the_event_and_the_delivery_id(db, receiver):
    url, rx = receiver
    delivery = deliver_one(channel("webhook", url))
    [got] = rx.received
    body = got.json()
    assert got.headers["x-gpu-portal-delivery"] == str(delivery.pk) == str(body["delivery"])
    assert body["event"]["rule"] == "gpu.temperature" and body["state"] == "firing"


@pytest.mark.parametrize("kind", ["dingtalk", "feishu", "webhook"])
def test_a_wrong_signing_secret_is_permanent_and_disables_the_channel(db, receiver, kind):
    url, rx = receiver
    ch = channel(kind, url, secret="SECa-different-secret-000")
    pending = Delivery.objects.create(channel=ch, next_attempt_at=timezone.now(), test=True)
    delivery = deliver_one(ch)
    ch.refresh_from_db()
    assert delivery.status == DeliveryStatus.FAILED
    assert not ch.enabled and ch.disabled_reason
    assert delivery.attempt_log.get().permanent
    # What was still queued for the channel is cancelled, not sent.
    assert outbox.deliver(pending.pk) == DeliveryStatus.CANCELLED
    assert len(rx.received) == 1


def test_a_revoked_wecom_key_disables_the_channel(db, receiver):
    url, _rx = receiver
    ch = channel("wecom", url)
    Channel.objects.filter(pk=ch.pk).update(secrets_encrypted="")
    ch.set_secrets({"url": url + "/cgi-bin/webhook/send?key=revoked"})
    ch.save()
    deliver_one(ch)
    ch.refresh_from_db()
    assert not ch.enabled and "93000" in ch.disabled_reason


def test_a_server_error_is_retried_with_growing_delays(db, receiver, settings):
    settings.ALERT_RETRY_BASE, settings.ALERT_RETRY_MAX = 0.01, 0.02
    url, rx = receiver
    rx.status = 503
    ch = channel("slack", url)
    delivery = deliver_one(ch)
    assert delivery.status == DeliveryStatus.PENDING
    assert outbox.backoff(1) == 0.01 and outbox.backoff(2) == 0.02 and outbox.backoff(9) == 0.02
    time.sleep(0.05)
    assert outbox.deliver(delivery.pk) == "retry"
    delivery.refresh_from_db()
    assert [a.ok for a in delivery.attempt_log.order_by("number")] == [False, False]
    assert "503" in delivery.last_error
    ch.refresh_from_db()
    assert ch.enabled


def test_transient_errors_past_the_horizon_fail_the_delivery_not_the_channel(db, settings):
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    ch = channel("slack", f"http://127.0.0.1:{procs.free_port()}")
    delivery = Delivery.objects.create(channel=ch, next_attempt_at=timezone.now(), test=True)
    Delivery.objects.filter(pk=delivery.pk).update(created=timezone.now() - timedelta(days=1))
    assert outbox.deliver(delivery.pk) == DeliveryStatus.FAILED
    ch.refresh_from_db()
    assert ch.enabled


def test_a_redirect_is_not_followed(db, receiver):
    url, rx = receiver
    rx.status = 302
    delivery = deliver_one(channel("webhook", url))
    assert delivery.status == DeliveryStatus.FAILED and "302" in delivery.last_error
    assert len(rx.received) == 1


def test_a_url_into_a_denied_network_is_refused_before_connecting(db, receiver, settings):
    url, rx = receiver
    ch = channel("webhook", url)
    settings.ALERT_HTTP_ALLOWED_HOSTS = []
    ch.set_secrets({"url": url.replace("http:", "https:") + "/webhook/hook", "secret": SECRET})
    ch.save()
    delivery = deliver_one(ch)
    assert delivery.status == DeliveryStatus.FAILED
    assert "127.0.0.1" in delivery.last_error and rx.received == []


def test_a_delivery_is_claimed_once_and_an_abandoned_claim_is_taken_again(db, settings):
    delivery = Delivery.objects.create(
        channel=channel("email", address="a@example.com"), next_attempt_at=timezone.now()
    )
    assert outbox.claim(delivery.pk) is not None
    assert outbox.claim(delivery.pk) is None
    Delivery.objects.filter(pk=delivery.pk).update(
        claimed_at=timezone.now() - timedelta(seconds=settings.ALERT_CLAIM_TIMEOUT + 1)
    )
    again = outbox.claim(delivery.pk)
    assert again is not None and again.attempts == 2
    assert outbox.requeue_due() == []  # claimed afresh: nothing to requeue
    # The abandoned try is logged (counted in attempts, so shown), as lost.
    [lost] = delivery.attempt_log.all()
    assert lost.number == 1 and not lost.ok and "lost" in lost.error


def test_a_slow_worker_that_outlived_its_claim_records_its_own_outcome(db, settings):
    delivery = Delivery.objects.create(
        channel=channel("email", address="a@example.com"), next_attempt_at=timezone.now()
    )
    slow = outbox.claim(delivery.pk)
    Delivery.objects.filter(pk=delivery.pk).update(
        claimed_at=timezone.now() - timedelta(seconds=settings.ALERT_CLAIM_TIMEOUT + 1)
    )
    assert outbox.claim(delivery.pk) is not None  # taken over; try 1 logged as lost
    outbox._record(slow, timezone.now(), 5, None)  # the slow worker ends after all
    [first] = delivery.attempt_log.all()
    assert first.number == 1 and first.ok and first.error == "" and first.duration_ms == 5


def test_the_same_fingerprint_while_open_is_one_event(db):
    what = events.Occurrence(fingerprint="fp-a", scope="node:a", summary="hot")
    first, _ = events.fire(rule(), what)
    again, _ = events.fire(rule(), events.Occurrence("fp-a", "node:a", summary="still"))
    assert first == again and Event.objects.get(pk=first).summary == "still"
    assert events.clear(first) and not events.clear(first)
    assert Event.objects.get(pk=first).state == EventState.RESOLVED
    reopened, _ = events.fire(rule(), what)  # no renotify interval: a new event
    assert reopened != first and Event.objects.count() == 2


# --- with a real Celery worker ---------------------------------------------------------------


@pytest.fixture
def worker_env(transactional_db, child_env_for_test_db, settings) -> dict[str, str]:
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    return {
        **child_env_for_test_db,
        "ALERT_HTTP_ALLOWED_HOSTS": "127.0.0.1",
        "ALERT_RETRY_BASE": "0.3",
        "ALERT_RETRY_MAX": "0.6",
        "ALERT_CLAIM_TIMEOUT": "2",
    }


def wait_until(check, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_receiver_down_then_back_gets_the_alert(worker_env):
    port = procs.free_port()
    worker = procs.start_celery_worker(worker_env, "alerts-down")
    try:
        ch = channel("webhook", f"http://127.0.0.1:{port}")
        delivery_id = fire_to(ch, "Down then back")
        wait_until(lambda: Delivery.objects.get(pk=delivery_id).attempts >= 3)
        assert Delivery.objects.get(pk=delivery_id).status == DeliveryStatus.PENDING
        rx = Receiver()
        server = serve_on(port, rx)
        try:
            wait_until(lambda: Delivery.objects.get(pk=delivery_id).status != "pending")
        finally:
            server.shutdown()
            server.server_close()
    finally:
        worker.stop()
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.DELIVERED
    log = list(delivery.attempt_log.order_by("number"))
    assert [a.ok for a in log[:-1]] == [False] * (len(log) - 1) and log[-1].ok
    assert "Connection refused" in log[0].error or "refused" in log[0].error.lower()
    assert len(rx.received) == 1 and rx.received[0].json()["title"].endswith("Down then back")


def test_a_worker_killed_mid_delivery_loses_nothing(worker_env):
    rx = Receiver(hold=threading.Event())
    url, server = procs.serve(handler_for(rx))
    first = procs.start_celery_worker(worker_env, "alerts-killed")
    try:
        ch = channel("webhook", url)
        delivery_id = fire_to(ch, "Killed")
        assert rx.arrived.wait(30)
        first.popen.kill()  # SIGKILL: no chance to record or acknowledge anything
        first.popen.wait()
        rx.hold.set()
        rx.hold = None
        assert Delivery.objects.get(pk=delivery_id).status == DeliveryStatus.PENDING
        second = procs.start_celery_worker(worker_env, "alerts-second")
        try:
            time.sleep(2.1)  # the dead worker's claim is abandoned after ALERT_CLAIM_TIMEOUT
            from alerts.tasks import requeue_deliveries

            requeue_deliveries.delay()
            wait_until(lambda: Delivery.objects.get(pk=delivery_id).status != "pending")
        finally:
            second.stop()
    finally:
        server.shutdown()
        server.server_close()
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == DeliveryStatus.DELIVERED
    # At least once: the killed attempt's request arrived, and the retried one did.
    assert len(rx.received) == 2
    # Both tries are in the log: the cut one as lost, then the one that went through.
    log = list(delivery.attempt_log.order_by("number"))
    assert [(a.number, a.ok) for a in log] == [(1, False), (2, True)]
    assert delivery.attempts == 2 and "lost" in log[0].error
