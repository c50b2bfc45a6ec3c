from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TokensConfig(AppConfig):
    # Personal and service-account API tokens. Above quotas (a service account belongs to a
    # tenant); nothing imports it but the settings, which name its authentication class.
    name = "tokens"
    verbose_name = _("API tokens")
