"""Deleting a node while a poll cycle records it: both succeed, on two real connections."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, connections

from agents.choices import NodeState
from agents.models import GPU, Node
from telemetry import services
from tests.factories import NodeFactory
from tests.test_fleet_services import gpu, ok, snapshot


def _waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


DELETES: dict[str, Callable[[int], object]] = {
    "the node's delete()": lambda pk: Node.objects.get(pk=pk).delete(),
    "a queryset delete (the admin's bulk action)": lambda pk: Node.objects.filter(pk=pk).delete(),
}


@pytest.mark.parametrize("delete", DELETES.values(), ids=DELETES.keys())
@pytest.mark.django_db(transaction=True)
def test_a_node_deleted_between_reading_the_nodes_and_writing_its_cards(monkeypatch, delete):
    doomed, other = NodeFactory(name="doomed"), NodeFactory(name="other")
    outcome: dict[str, object] = {}

    def delete_elsewhere() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                outcome["pid"] = cursor.fetchone()[0]
            outcome["deleted"] = delete(doomed.pk)
        except Exception as exc:  # the 500 an admin would see
            outcome["error"] = exc
        finally:
            connections.close_all()

    record_gpus = services._record_gpus

    def at_the_boundary(answered, now):
        # The cycle has read its nodes; another connection deletes one of them now. Go on
        # once that delete is finished or waits for this cycle.
        thread = threading.Thread(target=delete_elsewhere)
        thread.start()
        deadline = time.monotonic() + 10
        while thread.is_alive() and time.monotonic() < deadline:
            if "pid" in outcome and _waiting_on_a_lock(outcome["pid"]):
                break
            time.sleep(0.02)
        outcome["thread"] = thread
        return record_gpus(answered, now)

    monkeypatch.setattr(services, "_record_gpus", at_the_boundary)
    summary = services.record_poll_results(
        [ok(doomed, snapshot("d", gpu("GPU-D"))), ok(other, snapshot("o", gpu("GPU-O")))]
    )
    outcome["thread"].join(10)
    assert "error" not in outcome, outcome.get("error")
    assert summary.answered == 2
    assert not Node.objects.filter(pk=doomed.pk).exists()
    assert list(GPU.objects.values_list("uuid", flat=True)) == ["GPU-O"]
    other.refresh_from_db()
    assert other.state == NodeState.ONLINE


@pytest.mark.django_db(transaction=True)
def test_results_for_a_node_deleted_before_the_cycle_began_are_skipped():
    gone, kept = NodeFactory(name="gone"), NodeFactory(name="kept")
    results = [ok(gone, snapshot("g", gpu("GPU-G"))), ok(kept, snapshot("k", gpu("GPU-K")))]
    gone.delete()
    summary = services.record_poll_results(results)
    assert summary.answered == 1
    assert list(GPU.objects.values_list("uuid", flat=True)) == ["GPU-K"]
