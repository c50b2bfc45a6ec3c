"""DingTalk custom robot (自定义机器人): markdown message; with 加签 (signature) security,
``timestamp`` (ms) and ``sign`` = base64(HMAC-SHA256(key=secret, msg="{timestamp}\\n{secret}"))
are added to the query string, URL-encoded."""

from __future__ import annotations

import time
import urllib.parse

from django.utils.translation import gettext_lazy as _

from alerts.choices import ChannelKind
from alerts.transports import http
from alerts.transports.base import Message, SettingField, Transport, markdown
from alerts.transports.im import check_vendor_answer, hmac_sha256_b64

# 300001/300005: the access token does not exist; 310000: signature, keyword or IP
# whitelist mismatch; 400102: the robot was stopped. 130101 (too fast) is retried.
PERMANENT_CODES = frozenset({300001, 300005, 310000, 400101, 400102})


def sign(secret: str, timestamp_ms: int) -> str:
    return hmac_sha256_b64(key=secret, msg=f"{timestamp_ms}\n{secret}")


class DingTalkTransport(Transport):
    kind = ChannelKind.DINGTALK
    public_hosts = frozenset({"oapi.dingtalk.com"})
    fields = (
        SettingField(
            "url", _("Robot webhook URL"), secret=True,
            help_text=_("https://oapi.dingtalk.com/robot/send?access_token=…"),
        ),
        SettingField(
            "secret", _("Signing secret (加签)"), secret=True, required=False, max_length=200,
            help_text=_("The SEC… value shown when the robot's signature security is on."),
        ),
    )  # fmt: skip

    @classmethod
    def check(cls, name: str, value: str) -> str:
        if name == "url":
            return http.check_url(value, query_key="access_token")
        return value

    def notify(self, message: Message) -> None:
        url = self.value("url")
        secret = self.value("secret")
        if secret:
            timestamp = int(time.time() * 1000)
            query = urllib.parse.urlencode(
                {"timestamp": timestamp, "sign": sign(secret, timestamp)}
            )
            url = f"{url}&{query}"
        payload = {
            "msgtype": "markdown",
            "markdown": {"title": message.title[:100], "text": markdown(message)},
        }
        answer = http.post_json(url, payload)
        check_vendor_answer(answer, code_keys=("errcode",), permanent_codes=PERMANENT_CODES)
