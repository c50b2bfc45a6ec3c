"""Each signed-in request in its person's language and time zone.

Runs after Django's LocaleMiddleware (which picks the language from the switch's cookie or
the browser's ``Accept-Language``) and AuthenticationMiddleware: a language the user chose
(``quotas.tenancy.preferences``) wins over both, and their time zone is the one every date
on the page is shown in. Anonymous requests keep the browser's language and the site's
``TIME_ZONE``. API calls with a bearer token are authenticated later, by DRF: they keep the
browser's language (the ``Accept-Language`` header) and the site's time zone.
"""

from __future__ import annotations

import zoneinfo

from django.utils import timezone, translation

from quotas.tenancy.preferences import Preferences, preferences_of


class PreferenceMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        chosen = preferences_of(user) if user is not None and user.is_authenticated else None
        chosen = chosen or Preferences()
        if chosen.language:
            translation.activate(chosen.language)
            request.LANGUAGE_CODE = translation.get_language()
        try:
            zone = zoneinfo.ZoneInfo(chosen.effective_time_zone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            # A zone this Python no longer knows (tzdata changed): the site's.
            zone = zoneinfo.ZoneInfo(Preferences().effective_time_zone)
        timezone.activate(zone)
        try:
            return self.get_response(request)
        finally:
            # The activation lives in the thread (or task): the next request starts clean.
            timezone.deactivate()
