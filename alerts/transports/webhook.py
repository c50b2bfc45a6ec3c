"""Generic webhook: the message as JSON, signed. Headers:

- ``X-GPU-Portal-Timestamp``: Unix seconds when it was sent;
- ``X-GPU-Portal-Signature``: ``sha256=`` + hex HMAC-SHA256(key=secret,
  msg=f"{timestamp}.".encode() + body). The timestamp is inside the signed bytes, so a
  receiver that refuses old timestamps (say, over 5 minutes) cannot be fed a replay;
- ``X-GPU-Portal-Delivery``: the delivery's id. Delivery is at least once: a receiver
  that must not act twice remembers the ids it has seen.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from alerts.choices import ChannelKind
from alerts.transports import http
from alerts.transports.base import Message, SettingField, Transport


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class WebhookTransport(Transport):
    kind = ChannelKind.WEBHOOK
    fields = (
        SettingField("url", _("URL"), secret=True, help_text=_("https://… (receives a JSON POST)")),
        SettingField(
            "secret", _("Signing secret"), secret=True, required=False, max_length=200,
            help_text=_("Signs each request (X-GPU-Portal-Signature); recommended."),
        ),
    )  # fmt: skip

    @classmethod
    def check(cls, name: str, value: str) -> str:
        if name == "url":
            return http.check_url(value)
        if len(value) < 16:
            raise ValidationError(_("Use at least 16 characters."))
        return value

    def notify(self, message: Message) -> None:
        payload = {
            "delivery": message.delivery_id,
            "title": message.title,
            "summary": message.summary,
            "severity": message.severity,
            "state": message.state,
            "url": message.url,
            **dict(message.data),
        }
        body = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()
        timestamp = int(time.time())
        headers = {"X-GPU-Portal-Timestamp": str(timestamp)}
        if message.delivery_id is not None:
            headers["X-GPU-Portal-Delivery"] = str(message.delivery_id)
        secret = self.value("secret")
        if secret:
            headers["X-GPU-Portal-Signature"] = signature(secret, timestamp, body)
        http.raise_for_status(http.post(self.value("url"), body, headers))
