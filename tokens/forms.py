"""The token and service-account forms, and the Account page's preferences. They only carry
input; ``tokens.services`` (and ``quotas.interface`` for preferences) hold the rules, and
their field-level errors land on the fields here."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator
from django.utils.translation import get_language_info
from django.utils.translation import gettext_lazy as _

from quotas.interface import time_zones
from tokens.choices import Scope
from tokens.services import DESCRIPTION_MAX, NAME_MAX, max_days

# tokens.services' name for a field, where these forms call it otherwise: the service
# checks the end it works out, the form asks for days.
SERVICE_FIELDS = {"expires_at": "expires_in_days"}


class TokenForm(forms.Form):
    name = forms.CharField(
        label=_("Name"), max_length=NAME_MAX, help_text=_("What the token is for, e.g. CI.")
    )
    scope = forms.ChoiceField(label=_("Scope"), choices=Scope.choices, initial=Scope.WRITE)
    expires_in_days = forms.IntegerField(label=_("Expires in (days)"), min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        days = self.fields["expires_in_days"]
        days.max_value = max_days()
        days.initial = min(90, max_days())
        days.widget.attrs.update({"min": 1, "max": max_days()})
        days.validators.append(MaxValueValidator(max_days()))
        days.help_text = _("At most %(days)d days.") % {"days": max_days()}


class ServiceAccountForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=NAME_MAX)
    description = forms.CharField(
        label=_("Description"), max_length=DESCRIPTION_MAX, required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
    )  # fmt: skip


class PreferenceForm(forms.Form):
    """The Account page's language and time zone; ``quotas.interface.set_preferences``
    checks them again and keeps them."""

    language = forms.ChoiceField(label=_("Language"), required=False)
    time_zone = forms.ChoiceField(label=_("Time zone"), required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Each language in its own name (English, 简体中文), as the sidebar's switch shows them.
        self.fields["language"].choices = [
            ("", _("Browser default")),
            *((code, get_language_info(code)["name_local"]) for code, _name in settings.LANGUAGES),
        ]
        self.fields["time_zone"].choices = [
            ("", _("Site default (%(zone)s)") % {"zone": settings.TIME_ZONE}),
            *((zone, zone) for zone in time_zones()),
        ]
        self.fields["time_zone"].help_text = _(
            "Dates on every page are shown in it, e.g. Asia/Shanghai."
        )
