"""One transport class per channel kind, and the registry from kind to class."""

from __future__ import annotations

from alerts.transports.base import Message, SettingField, Transport, TransportError
from alerts.transports.dingtalk import DingTalkTransport
from alerts.transports.email import EmailTransport
from alerts.transports.feishu import FeishuTransport
from alerts.transports.slack import SlackTransport
from alerts.transports.webhook import WebhookTransport
from alerts.transports.wecom import WeComTransport

TRANSPORTS: dict[str, type[Transport]] = {
    cls.kind: cls
    for cls in (
        EmailTransport,
        DingTalkTransport,
        WeComTransport,
        FeishuTransport,
        SlackTransport,
        WebhookTransport,
    )
}

__all__ = ["TRANSPORTS", "Message", "SettingField", "Transport", "TransportError", "transport_for"]


def transport_for(channel) -> Transport:
    return TRANSPORTS[channel.kind](channel)
