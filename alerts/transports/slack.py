"""Slack incoming webhook: a ``text`` fallback (notifications) and a mrkdwn section block.
Slack answers errors with HTTP statuses (400 invalid_payload, 403 invalid_token, 404
no_service, 410 channel_is_archived: permanent; 429 and 5xx: retried)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

from alerts.choices import ChannelKind
from alerts.transports import http
from alerts.transports.base import (
    Message,
    SettingField,
    Transport,
    escape_mrkdwn,
    markdown,
    severity_marker,
)

SECTION_MAX_CHARS = 3000  # Slack's limit for a section's text


class SlackTransport(Transport):
    kind = ChannelKind.SLACK
    public_hosts = frozenset({"hooks.slack.com"})
    fields = (
        SettingField(
            "url", _("Incoming webhook URL"), secret=True,
            help_text=_("https://hooks.slack.com/services/…"),
        ),
    )  # fmt: skip

    @classmethod
    def check(cls, name: str, value: str) -> str:
        return http.check_url(value)

    def notify(self, message: Message) -> None:
        text = markdown(message, bold="*", link="<{url}|{text}>", escape=escape_mrkdwn)
        section = {"type": "mrkdwn", "text": text[:SECTION_MAX_CHARS]}
        payload = {
            "text": f"{severity_marker(message.severity)} {escape_mrkdwn(message.title)}",
            "blocks": [{"type": "section", "text": section}],
        }
        http.raise_for_status(http.post_json(self.value("url"), payload))
