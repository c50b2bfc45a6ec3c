"""Email through Django's mail (EMAIL_HOST and friends, docs/alerts.md). A recipient the
server refuses for good (5xx) is a permanent error; a server that is down, slow or says
"try later" (4xx) is retried."""

from __future__ import annotations

import smtplib

from django.conf import settings
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from alerts.choices import ChannelKind
from alerts.transports.base import Message, SettingField, Transport, TransportError, plain_text


class EmailTransport(Transport):
    kind = ChannelKind.EMAIL
    fields = (SettingField("address", gettext_lazy("Email address"), max_length=254),)

    @classmethod
    def check(cls, name: str, value: str) -> str:
        validate_email(value)
        if any(ch in value for ch in "\r\n"):
            raise ValidationError(_("Enter a valid email address."))
        return value

    def notify(self, message: Message) -> None:
        subject = f"[{message.severity.upper()}] {message.title}"[:200]
        email = mail.EmailMessage(
            subject=subject,
            body=plain_text(message),
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=[self.value("address")],
            connection=mail.get_connection(timeout=settings.ALERT_HTTP_TIMEOUT),
        )
        try:
            email.send()
        except smtplib.SMTPRecipientsRefused as exc:
            code, text = next(iter(exc.recipients.values()), (0, b""))
            raise TransportError(
                _("Recipient refused: %(code)s %(text)s") % {"code": code, "text": _decode(text)},
                permanent=code >= 500,
            ) from None
        except smtplib.SMTPResponseException as exc:
            raise TransportError(
                _("Mail server said: %(code)s %(text)s")
                % {"code": exc.smtp_code, "text": _decode(exc.smtp_error)}
            ) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise TransportError(_("Mail server unreachable: %(error)s") % {"error": exc}) from None


def _decode(text: bytes | str) -> str:
    return text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
