"""Feishu / Lark custom bot (自定义机器人): an interactive card with a markdown element;
with signature verification (签名校验) on, ``timestamp`` (seconds) and ``sign`` =
base64(HMAC-SHA256(key="{timestamp}\\n{secret}", msg=b"")) go in the JSON body."""

from __future__ import annotations

import time

from django.utils.translation import gettext_lazy as _

from alerts.choices import ChannelKind
from alerts.transports import http
from alerts.transports.base import Message, SettingField, Transport, markdown
from alerts.transports.im import check_vendor_answer, hmac_sha256_b64

# 19001 invalid webhook, 19002 bad parameters, 19021 signature mismatch (or timestamp off
# by more than an hour), 19022 IP not allowed, 19024 keyword missing, 9499 bad request.
# 11232 (rate limited) is retried.
PERMANENT_CODES = frozenset({9499, 19001, 19002, 19021, 19022, 19024})
TEMPLATE_COLOURS = {"critical": "red", "warning": "orange", "info": "blue"}


def sign(secret: str, timestamp_s: int) -> str:
    # Feishu keys the HMAC with the string and signs nothing: the reverse of DingTalk.
    return hmac_sha256_b64(key=f"{timestamp_s}\n{secret}", msg="")


class FeishuTransport(Transport):
    kind = ChannelKind.FEISHU
    public_hosts = frozenset({"open.feishu.cn", "open.larksuite.com"})
    fields = (
        SettingField(
            "url", _("Bot webhook URL"), secret=True,
            help_text=_("https://open.feishu.cn/open-apis/bot/v2/hook/… (Lark: larksuite.com)"),
        ),
        SettingField(
            "secret", _("Signing secret (签名校验)"), secret=True, required=False, max_length=200,
            help_text=_("Shown when the bot's signature verification is on."),
        ),
    )  # fmt: skip

    @classmethod
    def check(cls, name: str, value: str) -> str:
        if name == "url":
            return http.check_url(value, path_prefix="/open-apis/bot/")
        return value

    def notify(self, message: Message) -> None:
        body = markdown(message).split("\n", 2)[-1].strip()  # the card header has the title
        payload: dict = {
            "msg_type": "interactive",
            "card": {
                "config": {"wide_screen_mode": True},
                "header": {
                    "template": TEMPLATE_COLOURS.get(message.severity, "blue"),
                    "title": {"tag": "plain_text", "content": message.title[:200]},
                },
                "elements": [{"tag": "markdown", "content": body or message.title}],
            },
        }
        secret = self.value("secret")
        if secret:
            timestamp = int(time.time())
            payload = {"timestamp": str(timestamp), "sign": sign(secret, timestamp), **payload}
        answer = http.post_json(self.value("url"), payload)
        check_vendor_answer(
            answer, code_keys=("code", "StatusCode"), permanent_codes=PERMANENT_CODES
        )
