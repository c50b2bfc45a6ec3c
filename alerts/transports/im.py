"""Shared by the IM robots: the answer (HTTP 200 with an error code in the body) and the
base64 HMAC-SHA256 that DingTalk and Feishu sign with."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging

from django.utils.translation import gettext as _

from alerts.transports import http
from alerts.transports.base import TransportError

log = logging.getLogger(__name__)


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
    code = http.vendor_code(answer, *code_keys)
    if code == 0:
        return
    if code is None:
        log.info("robot answered HTTP %s without an error code: %r", answer.status,
                 answer.body[:300])  # fmt: skip
        raise TransportError(_("The answer is not the robot's: it carries no error code."))
    # The vendor's message is not repeated (alerts/transports/http.py): the code is enough
    # to look up in its documentation, and the log keeps the rest.
    log.info("robot answered error %s: %r", code, answer.body[:300])
    raise TransportError(
        _("The robot answered error code %(code)s.") % {"code": code},
        permanent=code in permanent_codes,
    )
