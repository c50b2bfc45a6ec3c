"""/api/v1/me/preferences/: the caller's own language and time zone
(``quotas.tenancy.preferences``); the same the Account page changes."""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api_views import ApiView
from quotas.tenancy import preferences
from quotas.tenancy.api.serializers import call_service

EXAMPLE = OpenApiExample(
    "Chinese, Shanghai time",
    value={"language": "zh-hans", "time_zone": "Asia/Shanghai",
           "effective_time_zone": "Asia/Shanghai"},
)  # fmt: skip
# The change asked: effective_time_zone is an answer's alone (the schema validates it).
ASKED = OpenApiExample(
    "Chinese, Shanghai time",
    value={"language": "zh-hans", "time_zone": "Asia/Shanghai"},
    request_only=True,
)
ANSWERED = OpenApiExample(EXAMPLE.name, value=EXAMPLE.value, response_only=True)
DEFAULTS = OpenApiExample(
    "The browser's language, the site's time zone",
    value={"language": "", "time_zone": "", "effective_time_zone": "UTC"},
)


class PreferenceSerializer(serializers.Serializer):
    language = serializers.ChoiceField(
        choices=list(settings.LANGUAGES), required=False, allow_blank=True,
        help_text="The language of your pages, e-mails and IM messages: en or zh-hans; empty "
        "to follow your browser's Accept-Language.",
    )  # fmt: skip
    time_zone = serializers.CharField(
        required=False, allow_blank=True, max_length=64,
        help_text="An IANA time zone name such as Asia/Shanghai, in which your pages show "
        "dates; empty for the site's (TIME_ZONE).",
    )  # fmt: skip
    effective_time_zone = serializers.CharField(
        read_only=True, help_text="The time zone your dates are shown in now."
    )


def _answer(found: preferences.Preferences) -> Response:
    return Response({"language": found.language, "time_zone": found.time_zone,
                     "effective_time_zone": found.effective_time_zone})  # fmt: skip


class PreferenceView(ApiView):
    @extend_schema(
        summary=_("Retrieve your preferences"), responses=PreferenceSerializer,
        examples=[EXAMPLE, DEFAULTS],
        description=_("Your language and time zone; empty values follow the defaults."),
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        return _answer(preferences.preferences_of(request.user))

    @extend_schema(
        summary=_("Change your preferences"), request=PreferenceSerializer,
        responses=PreferenceSerializer, examples=[ASKED, ANSWERED],
        description=_(
            "Change your language or time zone (only the fields sent). A language the "
            "portal does not have or an unknown time zone is a 400 naming the field, and "
            "nothing changes."
        ),
    )  # fmt: skip
    def patch(self, request: Request) -> Response:
        serializer = PreferenceSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        changes = {name: data[name] for name in ("language", "time_zone") if name in data}
        return _answer(call_service(preferences.set_preferences, request.user, **changes))
