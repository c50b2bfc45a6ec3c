"""The language switch in every page's sidebar: Django's ``set_language``, which also keeps
a signed-in person's choice (``quotas.tenancy.preferences``), so it follows them to
another browser and into their e-mails and IM messages."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils import translation
from django.views import i18n
from django.views.decorators.http import require_POST

from quotas.tenancy.preferences import language_codes, set_preferences


@require_POST
def set_language(request: HttpRequest) -> HttpResponse:
    response = i18n.set_language(request)
    language = request.POST.get("language", "")
    if (
        request.user.is_authenticated
        and language in language_codes()
        and translation.check_for_language(language)
    ):
        set_preferences(request.user, language=language)
    return response
