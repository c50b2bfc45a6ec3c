from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AlertsConfig(AppConfig):
    # Alert rules, events, subscriptions and channels arrive with the alerting issue.
    name = "alerts"
    verbose_name = _("Alerts")
