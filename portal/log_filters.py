"""Logging filters named in ``settings.LOGGING``."""

from __future__ import annotations

import logging


class ClientErrorsWithoutTraceback(logging.Filter):
    """Django logs a refused request (403 from PermissionDenied, 400 from a bad request)
    with the exception's traceback; for a 4xx that is the portal working, not failing, and
    the tracebacks buried real errors in operators' logs. The line itself stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = record.exc_text = None
        return True
