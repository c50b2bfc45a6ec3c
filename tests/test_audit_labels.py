"""Audit actions read as words, in the reader's language: each app names the actions it
records (``audit.interface.name_actions``); the audit log and a request's history show
the name, the code beside it for filtering; an action nobody named shows as its code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.utils import translation

from audit.interface import action_label, record
from quotas.choices import RequestState
from reports.choices import WarningState
from tests import clients

REPO = Path(__file__).resolve().parent.parent
APPS = ("audit", "agents", "quotas", "pools", "reports", "tokens", "clusters", "directory")
# A literal action as the apps pass it to record / entry / their own helpers.
LITERAL = re.compile(r'"((?:request|tenant|membership|quota|user|pool|pool_card|allocation|'
                     r'node|reclaim|reclaim_policy|unit_price|api_token|service_account|'
                     r'cluster|directory|login|logout)(?:\.[a-z_]+)?)"')  # fmt: skip


def _recorded_literals() -> set[str]:
    found = set()
    for app in APPS:
        for path in (REPO / app).rglob("*.py"):
            if "migrations" in path.parts or path.name in ("choices.py", "apps.py"):
                continue
            text = path.read_text()
            if "record(" not in text and "_entry(" not in text and "_delete(" not in text:
                continue
            found |= {m for m in LITERAL.findall(text) if "." in m or m == "logout"}
    return found


def test_every_action_the_apps_record_has_a_name():
    # The literals, and the ones built from a state: a request's end, a warning's step.
    actions = _recorded_literals() | {
        f"request.{s}" for s in (RequestState.RELEASED, RequestState.CANCELLED,
                                 RequestState.EXPIRED)
    } | {f"reclaim.{s}" for s in WarningState.values if s != WarningState.WARNED}  # fmt: skip
    # Not actions: a channel group's name, a serializer's field path.
    actions -= {a for a in actions if a.split(".")[1] in ("username", "uuid", "model", "vendor",
                "memory_total_mib", "unix_user", "label", "id", "used", "usage", "picture",
                "changed", "errors", "detail", "pending", "expiring", "urls", "event")}  # fmt: skip
    assert len(actions) > 40, sorted(actions)
    unnamed = sorted(a for a in actions if action_label(a) == a)
    assert unnamed == [], unnamed


def test_a_name_follows_the_language_and_an_unknown_action_shows_its_code():
    with translation.override("zh-hans"):
        assert action_label("request.approve") == "已批准"
        assert action_label("node.drained") != "Node drained"
    with translation.override("en"):
        assert action_label("request.approve") == "Approved"
    assert action_label("plugin.did_something") == "plugin.did_something"


@pytest.mark.django_db
def test_the_audit_log_shows_the_name_and_the_code(alice, carol):
    record("request.approve", carol, actor=alice)
    record("plugin.did_something", carol, actor=alice)
    body = clients.page(alice).get("/audit/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert "<div>已批准</div>" in body and '<code class="small">request.approve</code>' in body
    assert "<div>plugin.did_something</div>" in body
