"""The demo's alerting end to end: the simulator's hot scenario, read cycle by cycle
through telemetry's recording, fires the default temperature rule once; the demo's
channels get one email (a real SMTP server) and one webhook call (a real HTTP receiver);
when the card cools, one resolved notice on each."""

from __future__ import annotations

import email
import email.policy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agents.choices import NodeState
from agents.gpu_agent.backends.scenario import load_scenario
from agents.gpu_agent.backends.sim import SimulatedBackend
from agents.gpu_agent.snapshot_views import PORTAL, encode
from alerts import demo, outbox
from alerts.choices import DeliveryStatus
from alerts.models import Delivery, Event
from alerts.sources import metrics
from telemetry import services as telemetry
from telemetry.poller import PollResult
from tests import procs
from tests.alert_receivers import SECRET, Receiver, handler_for
from tests.factories import NodeFactory, UserFactory
from tests.test_alert_delivery import smtp  # noqa: F401 (the SMTP server fixture)

HOT = Path(__file__).resolve().parent.parent / "agents/gpu_agent/scenarios/hot.json"
T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


def test_an_overheating_card_sends_one_email_one_webhook_and_then_resolved(
    db,
    smtp,  # noqa: F811
    django_capture_on_commit_callbacks,
    settings,
):
    settings.ALERT_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    metrics.forget_caches()
    rx = Receiver()
    url, server = procs.serve(handler_for(rx))
    try:
        admin = UserFactory(is_superuser=True)
        demo.seed(
            admin, webhook_url=url + "/webhook/hook", email="oncall@example.com", secret=SECRET
        )
        node = NodeFactory(name="demo-hot", state=NodeState.ONLINE)
        clock = [T0.timestamp()]
        sim = SimulatedBackend("demo-hot", 2, "NVIDIA H100 80GB HBM3", 1,
                               clock=lambda: clock[0], scenario=load_scenario(HOT))  # fmt: skip
        timeline = []
        for step in range(0, 16 * 60, 10):  # 16 minutes, a cycle every 10 s
            clock[0] = T0.timestamp() + step
            snapshot = json.loads(encode(sim.collect(), PORTAL))
            with django_capture_on_commit_callbacks(execute=True):
                telemetry.record_poll_results([PollResult(node.pk, snapshot, "", 0.01)],
                                              now=T0 + timedelta(seconds=step))  # fmt: skip
            for delivery_id in Delivery.objects.filter(status="pending").values_list(
                "pk", flat=True
            ):
                outbox.deliver(delivery_id)
            temps = [c["temperature_c"] for c in snapshot["gpus"]]
            timeline.append((step, temps[0], Event.objects.filter(state="firing").count()))
    finally:
        server.shutdown()
        server.server_close()
    event = Event.objects.get()
    assert event.rule_key == "gpu-temperature" and event.state == "resolved"
    # It heats from 60 s, passes 85 °C within a minute and fires five minutes later.
    assert T0 + timedelta(seconds=360) <= event.started_at <= T0 + timedelta(seconds=480)
    assert T0 + timedelta(seconds=600) <= event.resolved_at <= T0 + timedelta(seconds=720)
    rows = list(Delivery.objects.values_list("status", "last_error", "channel__kind"))
    assert {r[0] for r in rows} == {DeliveryStatus.DELIVERED}, rows
    mails = [email.message_from_bytes(e.content, policy=email.policy.default)
             for e in smtp.envelopes]  # fmt: skip
    assert [m["Subject"].strip() for m in mails] == [
        "[CRITICAL] Firing: GPU temperature above 85 °C for 5 minutes",
        "[CRITICAL] Resolved: GPU temperature above 85 °C for 5 minutes",
    ]
    assert "node:demo-hot gpu:0" in mails[0].get_content()
    calls = [got.json() for got in rx.received]
    assert [c["state"] for c in calls] == ["firing", "resolved"]
    assert calls[0]["event"]["labels"]["node"] == "demo-hot"
