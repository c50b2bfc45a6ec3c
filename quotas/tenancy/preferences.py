"""Each person's language and time zone (``quotas.models.UserPreference``).

An empty language means the browser's (its ``Accept-Language``, or the language switch's
cookie); an empty time zone the site's ``TIME_ZONE``. ``quotas.tenancy.middleware``
activates both for each signed-in request; the alerts app writes a user's own messages in
their language (``language_of_user``). Changing one's own preferences is not audited: it
grants nothing and touches nobody else.
"""

from __future__ import annotations

import zoneinfo
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _

from quotas.models import UserPreference

UNSET = object()


@dataclass(frozen=True)
class Preferences:
    language: str = ""  # "" = the browser's
    time_zone: str = ""  # "" = settings.TIME_ZONE

    @property
    def effective_time_zone(self) -> str:
        return self.time_zone or settings.TIME_ZONE


@cache
def time_zones() -> tuple[str, ...]:
    """Every IANA zone name this Python knows, sorted (the form's and the API's choices)."""
    return tuple(sorted(zoneinfo.available_timezones()))


def language_codes() -> tuple[str, ...]:
    return tuple(code for code, _name in settings.LANGUAGES)


def preferences_of(user) -> Preferences:
    """``user``'s preferences (a user or their id); the defaults for anonymous or none."""
    user_id = getattr(user, "pk", user)
    if user_id is None:
        return Preferences()
    row = UserPreference.objects.filter(user_id=user_id).values("language", "time_zone").first()
    return Preferences(**row) if row else Preferences()


def language_of_user(user) -> str:
    """The language ``user`` chose, or "" when they follow their browser."""
    return preferences_of(user).language


def preference_errors(language=UNSET, time_zone=UNSET) -> dict[str, list[str]]:
    """What is wrong with the given values, per field (only those given are checked)."""
    errors: dict[str, list[str]] = {}
    if language is not UNSET and language not in ("", *language_codes()):
        errors["language"] = [
            _("%(value)s is not a language of the portal.") % {"value": str(language)[:40]}
        ]
    if time_zone is not UNSET and time_zone not in ("", *time_zones()):
        errors["time_zone"] = [
            _("%(value)s is not a time zone name, such as Asia/Shanghai.")
            % {"value": str(time_zone)[:70]}
        ]
    return errors


def set_preferences(user, *, language=UNSET, time_zone=UNSET) -> Preferences:
    """Change ``user``'s own preferences: only the values given; nothing changes when any
    is wrong (ValidationError per field)."""
    if not getattr(user, "is_authenticated", False):
        raise PermissionError(_("Sign in to keep preferences."))
    errors = preference_errors(language, time_zone)
    if errors:
        raise ValidationError(errors)
    changes = {
        name: value
        for name, value in (("language", language), ("time_zone", time_zone))
        if value is not UNSET
    }
    with transaction.atomic():
        row, _created = UserPreference.objects.select_for_update().get_or_create(user_id=user.pk)
        for name, value in changes.items():
            setattr(row, name, value)
        if changes:
            row.save()
    return Preferences(language=row.language, time_zone=row.time_zone)
