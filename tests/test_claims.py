"""portal.claims.insert_once: a key claimed once (Idempotency-Keys, digests sent), on any
model's unique index. Concurrent claims are in tests/test_digest_once.py."""

from __future__ import annotations

import uuid

import pytest

from portal.claims import insert_once
from quotas.models import SentNotice
from reports.models import DigestSent

pytestmark = pytest.mark.django_db


def test_the_first_claim_inserts_and_a_second_finds_the_key_taken():
    first = DigestSent(name="idle-digest", period="2026-12-07")
    assert insert_once(first) is True
    assert first.pk is not None and not first._state.adding and first.sent_at is not None
    again = DigestSent(name="idle-digest", period="2026-12-07", recipients=9)
    assert insert_once(again) is False and again.pk is None
    assert DigestSent.objects.get().recipients == 0  # the first row, untouched
    assert insert_once(DigestSent(name="idle-digest", period="2026-12-08")) is True


def test_a_model_keyed_by_its_own_primary_key():
    key = uuid.uuid4()
    notice = SentNotice(key=key)
    assert insert_once(notice) is True and notice.pk == key
    assert insert_once(SentNotice(key=key)) is False
    assert SentNotice.objects.count() == 1
