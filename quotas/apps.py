from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QuotasConfig(AppConfig):
    # Tenants, memberships, quotas and GPU requests arrive with the quota issue.
    name = "quotas"
    verbose_name = _("Quotas")
