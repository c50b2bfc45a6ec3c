"""The token and service-account forms. They only carry input; ``tokens.services`` holds
the rules, and its field-level errors land on the fields here."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import MaxValueValidator
from django.utils.translation import gettext_lazy as _

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
