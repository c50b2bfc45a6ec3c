"""The reclaim forms on the idle report: appeal, decide an appeal, exempt a lease. The
services validate again; these give the page its field errors."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from reports.services import MAX_TEXT


class AppealForm(forms.Form):
    reason = forms.CharField(label=_("Why keep it"), max_length=MAX_TEXT)


class AppealDecisionForm(forms.Form):
    grant = forms.TypedChoiceField(
        label=_("Decision"), choices=[("1", _("Grant")), ("0", _("Refuse"))],
        coerce=lambda v: v == "1",
    )  # fmt: skip
    comment = forms.CharField(label=_("Comment"), max_length=MAX_TEXT, required=False)
    until = forms.DateTimeField(label=_("Exempt until"), required=False)


class ExemptionForm(forms.Form):
    reason = forms.CharField(label=_("Reason"), max_length=MAX_TEXT)
    ends_at = forms.DateTimeField(label=_("Ends at"))
