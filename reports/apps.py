from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ReportsConfig(AppConfig):
    """Idle detection, reclaim, the idle digest and the GPU-hour accounting."""

    name = "reports"
    verbose_name = _("Reports")
