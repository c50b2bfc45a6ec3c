"""WeCom (企业微信) group robot (群机器人): the robot's key is its credential, in the
webhook URL (``…/cgi-bin/webhook/send?key=…``); markdown messages."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

from alerts.choices import ChannelKind
from alerts.transports import http
from alerts.transports.base import Message, SettingField, Transport, markdown
from alerts.transports.im import check_vendor_answer

# 93000 invalid webhook URL (a wrong or deleted key), 40008 invalid message type, 44004
# empty content, 40058 bad parameters. 45009 (over the rate limit) is retried.
PERMANENT_CODES = frozenset({93000, 40008, 44004, 40058})
# WeCom refuses markdown content over 4096 bytes.
CONTENT_MAX_BYTES = 4096


class WeComTransport(Transport):
    kind = ChannelKind.WECOM
    public_hosts = frozenset({"qyapi.weixin.qq.com"})
    fields = (
        SettingField(
            "url", _("Robot webhook URL"), secret=True,
            help_text=_("https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…"),
        ),
    )  # fmt: skip

    @classmethod
    def check(cls, name: str, value: str) -> str:
        return http.check_url(value, query_key="key")

    def notify(self, message: Message) -> None:
        content = markdown(message).encode()[:CONTENT_MAX_BYTES].decode("utf-8", "ignore")
        payload = {"msgtype": "markdown", "markdown": {"content": content}}
        answer = http.post_json(self.value("url"), payload)
        check_vendor_answer(answer, code_keys=("errcode",), permanent_codes=PERMANENT_CODES)
