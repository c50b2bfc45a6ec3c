"""The channel form. It only carries input; alerts.services and the kind's transport hold
the rules. One form for every kind: the page shows the settings the chosen kind uses
(static/alerts/channel_form.js) and the service ignores the rest."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from alerts.choices import ChannelKind
from alerts.models import Channel
from alerts.transports import TRANSPORTS
from quotas.models import Tenant

# Which kinds use each setting, for the page's script.
SETTING_KINDS = {
    name: " ".join(kind for kind, cls in TRANSPORTS.items() if name in {f.name for f in cls.fields})
    for name in ("address", "url", "secret")
}
SECRET_WIDGET = {"autocomplete": "new-password"}


class ChannelForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100)
    kind = forms.ChoiceField(label=_("Kind"), choices=ChannelKind.choices)
    tenant = forms.ModelChoiceField(
        label=_("Tenant"), queryset=Tenant.objects.none(), required=False,
        empty_label=_("Nobody else: my own channel"),
        help_text=_("A tenant's channel is managed by the tenant's admins."),
    )  # fmt: skip
    address = forms.CharField(
        label=_("Email address"), required=False, max_length=254,
        widget=forms.EmailInput(attrs={"data-kinds": SETTING_KINDS["address"]}),
    )  # fmt: skip
    url = forms.CharField(
        label=_("Robot or webhook URL"), required=False, max_length=2048,
        widget=forms.PasswordInput(render_value=False, attrs={
            **SECRET_WIDGET, "data-kinds": SETTING_KINDS["url"]}),
        help_text=_("As the robot's or service's settings show it; see the channel help."),
    )  # fmt: skip
    secret = forms.CharField(
        label=_("Signing secret"), required=False, max_length=200,
        widget=forms.PasswordInput(render_value=False, attrs={
            **SECRET_WIDGET, "data-kinds": SETTING_KINDS["secret"]}),
        help_text=_("DingTalk 加签 and Feishu 签名校验 secrets; the webhook's HMAC key."),
    )  # fmt: skip
    language = forms.ChoiceField(
        label=_("Message language"), required=False,
        choices=[("", _("Default (the owner's language, else the site's)")),
                 *list(settings.LANGUAGES)],
    )  # fmt: skip
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args, channel: Channel | None = None, tenants=None, **kwargs) -> None:
        if channel is not None:
            kwargs.setdefault("initial", {
                "name": channel.name, "kind": channel.kind, "language": channel.language,
                "enabled": channel.enabled, "address": channel.settings.get("address", ""),
            })  # fmt: skip
        super().__init__(*args, **kwargs)
        self.channel = channel
        if channel is None and tenants is not None and tenants.exists():
            self.fields["tenant"].queryset = tenants
        else:
            del self.fields["tenant"]
        if channel is not None and channel.secret_hint:
            for name in ("url", "secret"):
                self.fields[name].help_text = gettext(
                    "Stored: %(hint)s. Leave empty to keep it."
                ) % {"hint": channel.secret_hint}

    def settings_values(self) -> dict[str, str]:
        """The settings the chosen kind declares, as typed (empty secrets: keep)."""
        names = {f.name for f in TRANSPORTS[self.cleaned_data["kind"]].fields}
        return {name: self.cleaned_data.get(name, "") for name in names}
