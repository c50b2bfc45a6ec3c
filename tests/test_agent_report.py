"""The agent's slices report: kept by telemetry, refused for its node alone when hostile,
shown on the node and GPU pages (owners per telemetry.permissions) and per allocation."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string
from django.urls import reverse

from agents.models import Node
from pools.interface import Ask, agent_report, place_lease
from telemetry import interface, services
from telemetry.poller import PollResult
from tests.factories import GPUFactory, PoolFactory, UserFactory

UUID = "GPU-11111111-2222-3333-4444-555555555555"


def report(**extra) -> dict:
    return {
        "allocations": [
            {"allocation_id": "alloc-7", "gpu_uuid": UUID, "memory_limit_mib": 8192,
             "compute_pct": 30, "process_count": 2, "memory_used_mib": 9000, "extra": "x"},
        ],
        "violations": [
            {"kind": "over_memory", "gpu_uuid": UUID, "pids": [41, 42], "user": "mallory",
             "allocation_id": "alloc-7", "memory_used_mib": 9000, "memory_limit_mib": 8192},
            {"kind": "unallocated", "gpu_uuid": UUID, "pids": [99], "user": "trudy",
             "memory_used_mib": 100},
            {"kind": "unlimited", "gpu_uuid": UUID, "pids": [43], "user": "mallory",
             "allocation_id": "alloc-7", "memory_used_mib": 100, "memory_limit_mib": 8192},
        ],
        "desired_generation": 3,
        **extra,
    }  # fmt: skip


def answer(node: Node, **snapshot) -> PollResult:
    card = {"uuid": UUID, "index": 0, "name": "NVIDIA H100", "utilization_gpu_pct": 5}
    return PollResult(node.pk, {"hostname": node.name, "gpus": [card], **snapshot}, "", 0.01)


@pytest.fixture
def node(db) -> Node:
    return Node.objects.create(name="gpu-a", agent_url="http://127.0.0.1:1", agent_token="t")


@pytest.fixture
def other(db) -> Node:
    return Node.objects.create(name="gpu-b", agent_url="http://127.0.0.1:1", agent_token="t")


def test_latest_readings_carry_the_report_with_its_declared_fields_only(node):
    services.record_poll_results([answer(node, **report())])
    reading = interface.latest([node.pk])[node.pk]
    assert reading.desired_generation == 3
    [usage] = reading.allocations
    assert usage["allocation_id"] == "alloc-7" and "extra" not in usage
    assert [v["kind"] for v in reading.violations] == ["over_memory", "unallocated", "unlimited"]
    assert reading.violations[0]["pids"] == [41, 42]


def test_a_node_without_a_report_has_none(node):
    services.record_poll_results([answer(node)])
    reading = interface.latest([node.pk])[node.pk]
    assert reading.allocations == () and reading.violations == ()
    assert reading.desired_generation is None


HOSTILE = {
    "not a list": {"allocations": {"a": 1}},
    "too many": {"allocations": [
        {"allocation_id": f"a{i}", "gpu_uuid": UUID, "memory_limit_mib": 1} for i in range(4097)
    ]},
    "an entry not an object": {"violations": ["over_memory"]},
    "a long id": {"allocations": [{"allocation_id": "a" * 129, "gpu_uuid": UUID,
                                   "memory_limit_mib": 1}]},
    "a missing limit": {"allocations": [{"allocation_id": "a", "gpu_uuid": UUID}]},
    "a string count": {"allocations": [{"allocation_id": "a", "gpu_uuid": UUID,
                                        "memory_limit_mib": 1, "process_count": "2"}]},
    "a negative use": {"allocations": [{"allocation_id": "a", "gpu_uuid": UUID,
                                        "memory_limit_mib": 1, "memory_used_mib": -1}]},
    "an allocation twice": {"allocations": [
        {"allocation_id": "a", "gpu_uuid": UUID, "memory_limit_mib": 1}] * 2},
    "a kind that is no kind's name": {"violations": [{"kind": "Root Kit!", "pids": [1]}]},
    "a NUL in a user": {"violations": [{"kind": "unallocated", "user": "a\x00b"}]},
    "pids not ints": {"violations": [{"kind": "unallocated", "pids": ["1"]}]},
    "too many pids": {"violations": [{"kind": "unallocated", "pids": list(range(1025))}]},
    "a huge pid": {"violations": [{"kind": "unallocated", "pids": [2**40]}]},
    "a bool generation": {"desired_generation": True, "allocations": []},
}  # fmt: skip


def test_a_kind_this_portal_does_not_know_yet_is_dropped_not_refused(node):
    """An agent upgraded before its portal reports kinds the portal does not know: its
    node keeps its readings, and the kinds it knows."""
    newer = report(violations=[*report()["violations"], {"kind": "not_yet_known", "pids": [7]}])
    summary = services.record_poll_results([answer(node, **newer)])
    assert summary.answered == 1 and not summary.failed
    kinds = [v["kind"] for v in interface.latest([node.pk])[node.pk].violations]
    assert kinds == ["over_memory", "unallocated", "unlimited"]


@pytest.mark.parametrize("bad", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_report_is_refused_for_its_node_alone(node, other, bad):
    summary = services.record_poll_results([answer(node, **bad), answer(other, **report())])
    assert summary.answered == 1 and set(summary.failed) == {node.pk}
    node.refresh_from_db()
    assert node.last_error  # the reason is recorded for node managers
    latest = interface.latest([node.pk, other.pk])
    assert node.pk not in latest and latest[other.pk].allocations


@pytest.fixture
def reported_card(node):
    services.record_poll_results([answer(node, **report())])
    return node.gpus.get()


def test_node_and_gpu_pages_show_the_report_to_members_without_owners(client, bob, reported_card):
    client.force_login(bob)
    for url in (
        reverse("telemetry:node", args=[reported_card.node_id]),
        reverse("telemetry:gpu", args=[reported_card.pk]),
    ):
        page = client.get(url).content.decode()
        assert 'id="slices-report"' in page and "alloc-7" in page
        assert "9000 / 8192 MiB" in page and "Over its slice&#x27;s memory" in page
        assert "Started without its slice&#x27;s memory limit" in page
        assert "41, 42" in page
        assert "mallory" not in page and "trudy" not in page


def test_node_page_shows_violating_owners_to_who_may_see_owners(client, carol, reported_card):
    client.force_login(carol)
    page = client.get(reverse("telemetry:node", args=[reported_card.node_id])).content.decode()
    assert "mallory" in page and "trudy" in page


def test_a_gpu_page_shows_only_its_cards_report(client, bob, reported_card, node):
    other_card = GPUFactory(node=node)
    client.force_login(bob)
    page = client.get(reverse("telemetry:gpu", args=[other_card.pk])).content.decode()
    assert 'id="slices-report"' in page and "alloc-7" not in page


def test_pages_escape_what_the_agent_reports(client, bob, node):
    hostile = report(violations=[{"kind": "unallocated", "gpu_uuid": "<script>x</script>"}])
    services.record_poll_results([answer(node, **hostile)])
    client.force_login(bob)
    page = client.get(reverse("telemetry:node", args=[node.pk])).content.decode()
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


def test_the_allocation_report_says_what_its_processes_use_and_its_violations(node):
    gpu = GPUFactory(node=node, uuid=UUID, memory_total_mib=81920)
    Node.objects.filter(pk=node.pk).update(state="online")
    lease = place_lease(
        PoolFactory(cards=[gpu]), Ask(compute_pct=30, memory_mib=8192),
        holder=UserFactory(), unix_user="mallory",
    )  # fmt: skip
    allocation = lease.allocations.get()
    agent_id = allocation.agent_id
    data = report()
    data["allocations"][0]["allocation_id"] = data["violations"][0]["allocation_id"] = agent_id
    services.record_poll_results([answer(node, **data)])
    shown = agent_report(allocation)
    assert shown["reported"] and shown["process_count"] == 2
    assert (shown["memory_used_mib"], shown["memory_limit_mib"]) == (9000, 8192)
    assert [v["kind"] for v in shown["violations"]] == ["over_memory"]
    assert shown["violations"][0]["user"] == "mallory"
    assert "user" not in agent_report(allocation, owners=False)["violations"][0]
    html = render_to_string("pools/_agent_report.html", {"report": shown})
    assert "9000 / 8192 MiB" in html and "41, 42" in html


def test_the_allocation_report_shows_the_agents_error_to_admins_only(node):
    gpu = GPUFactory(node=node, uuid=UUID, memory_total_mib=81920)
    Node.objects.filter(pk=node.pk).update(state="online")
    lease = place_lease(
        PoolFactory(cards=[gpu]), Ask(compute_pct=30, memory_mib=8192),
        holder=UserFactory(), unix_user="x",
    )  # fmt: skip
    allocation = lease.allocations.get()
    allocation.agent_error = "HTTP 422: slices[0].owner: expected a user name"
    shown = agent_report(allocation)
    assert not shown["reported"]
    member = render_to_string("pools/_agent_report.html", {"report": shown})
    admin = render_to_string(
        "pools/_agent_report.html", {"report": shown, "show_agent_error": True}
    )
    assert "expected a user name" not in member and "expected a user name" in admin
