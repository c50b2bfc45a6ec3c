"""One date style in both languages: "2026-12-02 17:01", never Django's English mix of
"Dec. 2, 2026, 4:51 p.m.", "5 p.m." and "12/02/2026 5:02 p.m."."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.template import Context, Template
from django.utils import formats, translation

from tests.factories import EventFactory

MOMENT = datetime(2026, 12, 2, 17, 1, tzinfo=UTC)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
@pytest.mark.parametrize(
    ("source", "shown"),
    [
        ("{{ when }}", "2026-12-02 17:01"),
        ("{{ when|date }}", "2026-12-02"),
        ('{{ when|date:"DATETIME_FORMAT" }}', "2026-12-02 17:01"),
        ('{{ when|date:"SHORT_DATETIME_FORMAT" }}', "2026-12-02 17:01"),
        ("{{ when|time }}", "17:01"),
    ],
)
def test_templates_write_one_style_in_both_languages(settings, language, source, shown):
    settings.TIME_ZONE = "UTC"
    with translation.override(language):
        assert Template(source).render(Context({"when": MOMENT})) == shown


def test_the_event_page_writes_its_times_in_that_style(client, alice):
    event = EventFactory(started_at=MOMENT)
    client.force_login(alice)
    body = client.get(f"/alerts/events/{event.pk}/").content.decode()
    assert formats.date_format(MOMENT, "DATETIME_FORMAT") == "2026-12-02 17:01"
    assert "2026-12-02 17:01" in body and "p.m." not in body
