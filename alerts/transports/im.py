"""Shared by the IM robots: the answer (HTTP 200 with an error code in the body) and the
base64 HMAC-SHA256 that DingTalk and Feishu sign with."""

from __future__ import annotations

import base64
import hashlib
import hmac

from django.utils.translation import gettext as _

from alerts.transports import http
from alerts.transports.base import TransportError


def hmac_sha256_b64(key: str, msg: str) -> str:
    """base64(HMAC-SHA256(key, msg)). The vendors differ in which string is the key and which
    the message (dingtalk.sign, feishu.sign), so each says so itself."""
    return base64.b64encode(hmac.new(key.encode(), msg.encode(), hashlib.sha256).digest()).decode()


def check_vendor_answer(
    answer: http.Answer, *, code_keys: tuple[str, ...], permanent_codes: frozenset[int]
) -> None:
    """Raise unless the answer says the robot took the message. Codes the vendor documents
    as configuration errors (bad key, signature mismatch, missing keyword) are permanent;
    others (rate limits, "system busy", anything unknown) are retried."""
    http.raise_for_status(answer)
    code, text = http.vendor_code(answer, *code_keys)
    if code == 0:
        return
    if code is None:
        raise TransportError(_("Unexpected answer: %(body)s") % {"body": text})
    raise TransportError(
        _("Error %(code)s: %(text)s") % {"code": code, "text": text},
        permanent=code in permanent_codes,
    )
