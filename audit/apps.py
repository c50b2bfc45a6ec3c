from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AuditConfig(AppConfig):
    # The bottom of the house beside agents: every app records here, it imports none.
    name = "audit"
    verbose_name = _("Audit log")
