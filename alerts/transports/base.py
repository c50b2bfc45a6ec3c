"""The contract every channel kind follows: ``Transport(channel).notify(message)``, which
returns when the far end accepted the message and raises ``TransportError`` otherwise;
``permanent=True`` when trying again cannot help (a revoked robot key, a refused address),
which disables the channel. Each kind declares its settings once (``fields``): the form,
the API and the check before saving all read that declaration."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.utils.functional import Promise
from django.utils.translation import gettext as _

ERROR_MAX_CHARS = 2000


class TransportError(Exception):
    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message[:ERROR_MAX_CHARS])
        self.message = message[:ERROR_MAX_CHARS]
        self.permanent = permanent


@dataclass(frozen=True)
class Message:
    """What is sent, already in the recipient's language. ``facts`` are (label, value)
    pairs shown as a list; ``data`` is the machine-readable form the webhook carries."""

    title: str
    summary: str
    severity: str
    state: str
    facts: tuple[tuple[str, str], ...] = ()
    url: str = ""
    delivery_id: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SettingField:
    name: str
    label: str | Promise
    secret: bool = False
    required: bool = True
    max_length: int = 2048
    help_text: str | Promise = ""


class Transport:
    kind: ClassVar[str]
    fields: ClassVar[tuple[SettingField, ...]] = ()
    # The vendor's own public hosts: anyone may point a channel there; any other host (a
    # private deployment, a generic webhook) is for those alerts.permissions lets.
    public_hosts: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, channel) -> None:
        self.channel = channel
        self._secrets: dict[str, str] | None = None

    def value(self, name: str) -> str:
        if name in self.channel.settings:
            return self.channel.settings[name]
        if self._secrets is None:
            self._secrets = self.channel.secrets
        return self._secrets.get(name, "")

    def notify(self, message: Message) -> None:
        raise NotImplementedError

    # --- settings ----------------------------------------------------------------------

    @classmethod
    def clean(
        cls, values: Mapping[str, Any], current_secrets: Mapping[str, str] | None = None
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Check ``values`` against the declaration: (settings, secrets) to store, or a
        ValidationError naming each bad field. A secret left out or empty keeps
        ``current_secrets``' value (an edit need not type it again)."""
        current_secrets = current_secrets or {}
        errors: dict[str, list[str]] = {}
        unknown = sorted(set(values) - {f.name for f in cls.fields})
        if unknown:
            errors.setdefault("settings", []).append(
                _("Unknown settings for this kind: %(names)s.") % {"names": ", ".join(unknown)}
            )
        plain: dict[str, str] = {}
        secrets: dict[str, str] = {}
        for spec in cls.fields:
            raw = values.get(spec.name)
            if raw is None or raw == "":
                raw = current_secrets.get(spec.name, "") if spec.secret else ""
            if not isinstance(raw, str):
                errors.setdefault(spec.name, []).append(_("Must be text."))
                continue
            raw = raw.strip()
            if len(raw) > spec.max_length:
                errors.setdefault(spec.name, []).append(
                    _("At most %(n)s characters.") % {"n": spec.max_length}
                )
                continue
            if "\x00" in raw:
                errors.setdefault(spec.name, []).append(_("Contains a NUL character."))
                continue
            if not raw:
                if spec.required:
                    errors.setdefault(spec.name, []).append(_("This setting is required."))
                continue
            try:
                raw = cls.check(spec.name, raw)
            except ValidationError as exc:
                errors.setdefault(spec.name, []).extend(exc.messages)
                continue
            (secrets if spec.secret else plain)[spec.name] = raw
        if errors:
            raise ValidationError(errors)
        return plain, secrets

    @classmethod
    def check(cls, name: str, value: str) -> str:
        """One setting's own rule (a URL's shape, an address); the value to store."""
        return value

    @classmethod
    def hint(cls, settings: Mapping[str, str], secrets: Mapping[str, str]) -> str:
        """What the pages show instead of the secrets: enough to recognise them."""
        parts = [f"…{value[-4:]}" for value in secrets.values() if value]
        return " ".join(parts)[:80]


def severity_marker(severity: str) -> str:
    return {"critical": "🔴", "warning": "🟠"}.get(severity, "🔵")


# Markdown's own characters, escaped with a backslash in the text a message carries: a
# summary from Alertmanager or a label from an agent is text, never a link, an image or
# emphasis. Block marks (#, >, -, +) matter only at the start of a line.
_INLINE_MARKS = re.compile(r"([\\`*_\[\]<>~])")
_LINE_MARKS = re.compile(r"^(\s*)([#>+-])", re.MULTILINE)


def escape_markdown(text: str) -> str:
    return _LINE_MARKS.sub(r"\1\\\2", _INLINE_MARKS.sub(r"\\\1", text))


def escape_mrkdwn(text: str) -> str:
    # Slack's mrkdwn has no backslash escape: its markup (links, @channel) needs <, > and &.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown(
    message: Message,
    *,
    bold: str = "**",
    link: str = "[{text}]({url})",
    escape=escape_markdown,
) -> str:
    """The message as markdown in the dialect given (Slack's mrkdwn bolds with one star,
    links as <url|text> and escapes with entities), its texts escaped."""
    title = escape(message.title)
    lines = [f"{bold}{severity_marker(message.severity)} {title}{bold}", ""]
    if message.summary:
        lines += [escape(message.summary), ""]
    lines += [f"- {bold}{escape(str(label))}{bold}: {escape(str(value))}"
              for label, value in message.facts]  # fmt: skip
    if message.url:
        lines += ["", link.format(text=_("Open in GPU Portal"), url=message.url)]
    return "\n".join(lines).strip()


def plain_text(message: Message) -> str:
    lines = [message.title, ""]
    if message.summary:
        lines += [message.summary, ""]
    lines += [f"{label}: {value}" for label, value in message.facts]
    if message.url:
        lines += ["", message.url]
    return "\n".join(lines).strip() + "\n"
