"""Rules evaluated from the poll cycle's hook: simulated readings go through telemetry's
own recording (``record_poll_results``), whose committed cycle runs the alerts receiver;
time is the cycle's. De-duplication, for-durations, re-notify timing and flapping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.choices import NodeState
from alerts import evaluate
from alerts.choices import Condition, DeliveryStatus, EventState, ScopeKind, Severity
from alerts.defaults import DEFAULT_RULES
from alerts.models import Delivery, Event, Rule
from alerts.rules import bump_rules_version
from alerts.sources import metrics
from telemetry import services as telemetry
from telemetry.interface import PollCycle
from telemetry.poller import PollResult
from tests.factories import (
    ChannelFactory,
    GPUFactory,
    NodeFactory,
    PoolFactory,
    SubscriptionFactory,
    TenantFactory,
    UserFactory,
)

T0 = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_caches():
    metrics.forget_caches()
    yield
    metrics.forget_caches()


@pytest.fixture
def node(db):
    node = NodeFactory(name="gpu-07", state=NodeState.ONLINE)
    GPUFactory(node=node, index=0, uuid="GPU-HOT")
    GPUFactory(node=node, index=1, uuid="GPU-COOL")
    return node


@pytest.fixture
def operator_channel(db):
    """A platform admin's channel subscribed to everything from info up."""
    admin = UserFactory(is_superuser=True)
    channel = ChannelFactory(owner=admin)
    SubscriptionFactory(owner=admin, channel=channel, min_severity=Severity.INFO)
    return channel


def card(uuid: str, index: int, temp: int = 50, **extra) -> dict:
    return {"uuid": uuid, "index": index, "name": "NVIDIA H100", "temperature_c": temp,
            "memory_used_mib": 1000, "memory_total_mib": 81920, "utilization_gpu_pct": 40,
            **extra}  # fmt: skip


def poll(node, at: datetime, *cards: dict, capture, **snapshot) -> None:
    """One recorded cycle at ``at`` (the hook runs once it commits)."""
    with capture(execute=True):
        telemetry.record_poll_results(
            [PollResult(node.pk, {"hostname": node.name, "gpus": list(cards), **snapshot}, "",
                        0.01)], now=at,
        )  # fmt: skip


def fail(node, at: datetime, capture) -> None:
    with capture(execute=True):
        telemetry.record_poll_results([PollResult(node.pk, None, "refused", 0.01)], now=at)


def deliveries(channel) -> list[str]:
    """What the channel was sent, in order: each event's state when it was routed."""
    rows = Delivery.objects.filter(channel=channel).order_by("pk").select_related("event")
    return [f"{d.event.rule_key}:{d.event_id}" for d in rows]


def test_the_default_rules_exist_after_migrate(db):
    keys = set(Rule.objects.filter(builtin=True).values_list("key", flat=True))
    assert keys == {r["key"] for r in DEFAULT_RULES}
    hot = Rule.objects.get(key="gpu-temperature")
    assert (hot.threshold, hot.for_seconds, hot.severity) == (85, 300, Severity.CRITICAL)


def test_a_hot_card_fires_once_after_five_minutes_and_resolves_when_it_cools(
    node, operator_channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    hot = card("GPU-HOT", 0, 91)
    for second in range(0, 300, 30):  # hot, but not yet for five minutes
        poll(node, T0 + timedelta(seconds=second), hot, card("GPU-COOL", 1), capture=capture)
    assert not Event.objects.exists()
    for second in range(300, 600, 30):  # five minutes and on: one event, one message
        poll(node, T0 + timedelta(seconds=second), hot, card("GPU-COOL", 1), capture=capture)
    event = Event.objects.get()
    assert (event.rule_key, event.state, event.scope) == ("gpu-temperature", "firing",
                                                          "node:gpu-07 gpu:0")  # fmt: skip
    assert event.labels["node"] == "gpu-07" and event.labels["value"] == "91"
    assert "91 °C (> 85 °C)" in event.summary and event.started_at == T0 + timedelta(seconds=300)
    assert len(deliveries(operator_channel)) == 1
    poll(node, T0 + timedelta(seconds=630), card("GPU-HOT", 0, 70), capture=capture)
    event.refresh_from_db()
    assert event.state == EventState.RESOLVED
    assert len(deliveries(operator_channel)) == 2


def test_a_card_still_hot_is_told_again_after_the_renotify_interval(
    node, operator_channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    Rule.objects.filter(key="gpu-temperature").update(for_seconds=0, renotify_seconds=600)
    hot = card("GPU-HOT", 0, 95)
    for second in range(0, 1260, 5):  # 21 minutes of readings every 5 s
        poll(node, T0 + timedelta(seconds=second), hot, capture=capture)
    # Told at 0, then at 10 and 20 minutes; one event throughout.
    assert Event.objects.count() == 1
    assert len(deliveries(operator_channel)) == 3


def test_an_acknowledged_event_is_not_told_again(
    node, operator_channel, django_capture_on_commit_callbacks, alice
):
    from alerts import events

    capture = django_capture_on_commit_callbacks
    Rule.objects.filter(key="gpu-temperature").update(for_seconds=0, renotify_seconds=60)
    poll(node, T0, card("GPU-HOT", 0, 95), capture=capture)
    assert events.acknowledge(Event.objects.get().pk, actor=alice, address="10.0.0.1")
    for second in range(5, 600, 5):
        poll(node, T0 + timedelta(seconds=second), card("GPU-HOT", 0, 95), capture=capture)
    assert len(deliveries(operator_channel)) == 1


def test_a_flapping_card_floods_nobody(node, operator_channel, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    Rule.objects.filter(key="gpu-temperature").update(for_seconds=0, renotify_seconds=3600)
    for minute in range(30):  # above, then below, every other minute for half an hour
        temp = 95 if minute % 2 == 0 else 60
        poll(node, T0 + timedelta(minutes=minute), card("GPU-HOT", 0, temp), capture=capture)
    # One event, reopened silently: one firing and one resolved message in the hour.
    assert Event.objects.count() == 1
    assert len(deliveries(operator_channel)) == 2


def test_a_node_offline_fires_after_its_duration_and_clears_when_it_answers(
    node, operator_channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    poll(node, T0, card("GPU-HOT", 0), capture=capture)
    fail(node, T0 + timedelta(seconds=10), capture)
    fail(node, T0 + timedelta(seconds=40), capture)
    assert not Event.objects.filter(rule_key="node-offline").exists()
    fail(node, T0 + timedelta(seconds=75), capture)
    event = Event.objects.get(rule_key="node-offline")
    assert event.scope == "node:gpu-07" and event.state == EventState.FIRING
    poll(node, T0 + timedelta(seconds=90), card("GPU-HOT", 0), capture=capture)
    event.refresh_from_db()
    assert event.state == EventState.RESOLVED


def test_card_faults_fire_at_once(node, operator_channel, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    poll(node, T0, card("GPU-HOT", 0, xid_last=79, ecc_uncorrected_total=2),
         {"uuid": "GPU-COOL", "index": 1, "health": "lost"}, capture=capture)  # fmt: skip
    fired = dict(Event.objects.values_list("rule_key", "scope"))
    assert fired == {"gpu-xid": "node:gpu-07 gpu:0", "gpu-ecc-uncorrectable": "node:gpu-07 gpu:0",
                     "gpu-lost": "node:gpu-07 gpu:1"}  # fmt: skip
    assert Event.objects.get(rule_key="gpu-xid").labels["xid"] == "79"


def test_a_process_over_its_slice_fires(node, operator_channel, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    violation = {
        "kind": "over_memory",
        "gpu_uuid": "GPU-HOT",
        "user": "mallory",
        "allocation_id": "alloc-3",
        "memory_used_mib": 9000,
        "memory_limit_mib": 8192,
    }
    poll(node, T0, card("GPU-HOT", 0), capture=capture, violations=[violation],
         allocations=[], desired_generation=1)  # fmt: skip
    event = Event.objects.get(rule_key="process-over-slice")
    assert event.labels["user"] == "mallory" and event.labels["allocation"] == "alloc-3"
    assert event.summary == "node:gpu-07 gpu:0: Memory used 9000 MiB"  # what it counts, its unit


def test_a_process_without_its_slices_limit_fires_once_it_stays(
    node, operator_channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    violation = {"kind": "unlimited", "gpu_uuid": "GPU-HOT", "user": "mallory", "pids": [7],
                 "allocation_id": "alloc-3", "memory_used_mib": 500,
                 "memory_limit_mib": 8192}  # fmt: skip
    for seconds in (0, 30):  # the default rule waits a minute: a launch may be slow
        poll(node, T0 + timedelta(seconds=seconds), card("GPU-HOT", 0), capture=capture,
             violations=[violation], allocations=[], desired_generation=1)  # fmt: skip
    assert not Event.objects.filter(rule_key="process-unlimited").exists()
    poll(node, T0 + timedelta(seconds=70), card("GPU-HOT", 0), capture=capture,
         violations=[violation], allocations=[], desired_generation=1)  # fmt: skip
    event = Event.objects.get(rule_key="process-unlimited")
    assert event.labels["allocation"] == "alloc-3" and event.severity == "warning"
    poll(node, T0 + timedelta(seconds=80), card("GPU-HOT", 0), capture=capture,
         violations=[], allocations=[], desired_generation=1)  # fmt: skip
    event.refresh_from_db()
    assert event.state == EventState.RESOLVED


def test_a_node_that_does_not_answer_keeps_its_cards_events_open(
    node, operator_channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    Rule.objects.filter(key="gpu-temperature").update(for_seconds=0)
    poll(node, T0, card("GPU-HOT", 0, 95), capture=capture)
    fail(node, T0 + timedelta(seconds=5), capture)
    assert Event.objects.get(rule_key="gpu-temperature").state == EventState.FIRING


def test_a_disabled_rule_resolves_its_events_and_fires_no_more(
    node, operator_channel, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    Rule.objects.filter(key="gpu-temperature").update(for_seconds=0)
    poll(node, T0, card("GPU-HOT", 0, 95), capture=capture)
    Rule.objects.filter(key="gpu-temperature").update(enabled=False)
    metrics.forget_caches()
    poll(node, T0 + timedelta(seconds=5), card("GPU-HOT", 0, 95), capture=capture)
    assert Event.objects.get().state == EventState.RESOLVED


def test_a_rule_scoped_to_a_node_ignores_the_others(db):
    rule = evaluate.RuleSpec(1, "hot", "Hot", Condition.TEMPERATURE, threshold=80,
                             scope_kind=ScopeKind.NODE, scope_id=2)  # fmt: skip
    cards = {"A": evaluate.Card(10, 0, 1), "B": evaluate.Card(11, 0, 2)}

    class Reading:
        def __init__(self, uuid):
            self.cards = {uuid: type("C", (), {"values": {"temperature_c": 90}})()}
            self.violations = ()

    found = evaluate.findings([rule], {1: Reading("A"), 2: Reading("B")}, cards)
    assert [(f.node_id, f.target) for f in found] == [(2, "B")]


def test_a_pending_state_is_kept_in_redis_not_the_database(
    node, django_capture_on_commit_callbacks, django_assert_max_num_queries
):
    capture = django_capture_on_commit_callbacks
    poll(node, T0, card("GPU-HOT", 0, 95), capture=capture)  # warms the caches
    cycle_obj = PollCycle(at=T0 + timedelta(seconds=5), answered=(node.pk,))
    with django_assert_max_num_queries(0):
        metrics.evaluate_cycle(cycle_obj)
    assert Delivery.objects.filter(status=DeliveryStatus.PENDING).count() == 0


def _rename_behind_the_cache(key: str, name: str) -> None:
    # Changed in the database without the bump a save sends: what a process sees when
    # Redis lost the version while the rules changed (a restart without persistence).
    Rule.objects.filter(key=key).update(name=name)


def test_a_rules_copy_read_while_the_version_was_absent_is_reread_after_redis_loses_it(db):
    from portal import redis_client

    key = DEFAULT_RULES[0]["key"]
    assert key in {r.key for r in metrics.enabled_rules()}
    _rename_behind_the_cache(key, "renamed")
    redis_client.client().flushdb()
    # Absent before and absent now: a copy keyed by "no version" would match.
    assert {r.key: r.name for r in metrics.enabled_rules()}[key] == "renamed"


def test_a_rules_version_written_after_redis_lost_it_never_repeats_an_old_one(db):
    from alerts.rules import bump_rules_version
    from portal import redis_client

    key = DEFAULT_RULES[0]["key"]
    bump_rules_version()
    assert key in {r.key for r in metrics.enabled_rules()}
    redis_client.client().flushdb()
    _rename_behind_the_cache(key, "renamed")
    # A counter starts again at 1 after the flush: the copy read at 1 would match.
    bump_rules_version()
    assert {r.key: r.name for r in metrics.enabled_rules()}[key] == "renamed"
    # Unchanged since: the copy is kept, no query.
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        metrics.enabled_rules()
    assert len(queries) == 0


@pytest.mark.parametrize("scope", [ScopeKind.POOL, ScopeKind.TENANT, ScopeKind.NODE])
def test_a_rule_deleted_with_what_it_is_scoped_to_leaves_every_process_copy(
    db, scope, django_capture_on_commit_callbacks
):
    # The pool, tenant or node goes through its own app's service; the rule goes with it
    # by cascade, which no alerts service sees.
    from agents.registration import delete_node
    from pools.configuration import delete_pool
    from quotas.tenancy.services import delete_tenant

    target = {ScopeKind.POOL: PoolFactory, ScopeKind.TENANT: TenantFactory,
              ScopeKind.NODE: NodeFactory}[scope]()  # fmt: skip
    Rule.objects.create(key="scoped-hot", name="Scoped hot", condition=Condition.TEMPERATURE,
                        threshold=80, scope_kind=scope, **{scope: target})  # fmt: skip
    bump_rules_version()  # as saving it through alerts.config does
    assert "scoped-hot" in {r.key for r in metrics.enabled_rules()}
    with django_capture_on_commit_callbacks(execute=True):
        if scope == ScopeKind.POOL:
            delete_pool(target.pk)
        elif scope == ScopeKind.TENANT:
            delete_tenant(target.pk, UserFactory(is_superuser=True))
        else:
            delete_node(target.pk)
    assert not Rule.objects.filter(key="scoped-hot").exists()
    assert "scoped-hot" not in {r.key for r in metrics.enabled_rules()}


def _fire_hot(node, capture) -> Event:
    Rule.objects.filter(key="gpu-temperature").update(for_seconds=0)
    bump_rules_version()
    poll(node, T0, card("GPU-HOT", 0, 95), capture=capture)
    return Event.objects.get(rule_key="gpu-temperature", state=EventState.FIRING)


def test_an_event_firing_when_redis_lost_its_data_resolves_when_the_card_cools(
    node, operator_channel, django_capture_on_commit_callbacks
):
    from portal import redis_client

    capture = django_capture_on_commit_callbacks
    event = _fire_hot(node, capture)
    assert event.state_key == f"{node.pk}|{event.rule_id}|GPU-HOT"
    redis_client.client().flushdb()  # a restart without persistence
    poll(node, T0 + timedelta(seconds=30), card("GPU-HOT", 0, 60), capture=capture)
    event.refresh_from_db()
    assert event.state == EventState.RESOLVED
    assert len(deliveries(operator_channel)) == 2  # the firing and its resolution


def test_an_event_still_holding_after_redis_lost_its_data_stays_one_event(
    node, operator_channel, django_capture_on_commit_callbacks
):
    from portal import redis_client

    capture = django_capture_on_commit_callbacks
    event = _fire_hot(node, capture)
    redis_client.client().flushdb()
    for second in (30, 60, 90):
        poll(node, T0 + timedelta(seconds=second), card("GPU-HOT", 0, 96), capture=capture)
    assert list(Event.objects.values_list("pk", "state")) == [(event.pk, EventState.FIRING)]
    assert len(deliveries(operator_channel)) == 1
