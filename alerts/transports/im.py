"""Shared by the IM robots that answer HTTP 200 with an error code in the body."""

from __future__ import annotations

from django.utils.translation import gettext as _

from alerts.transports import http
from alerts.transports.base import TransportError


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
