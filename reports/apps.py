from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ReportsConfig(AppConfig):
    """Idle detection, reclaim, the idle digest and the GPU-hour accounting."""

    name = "reports"
    verbose_name = _("Reports")

    def ready(self) -> None:
        from audit.interface import name_actions
        from reports.choices import AUDIT_ACTIONS

        name_actions(AUDIT_ACTIONS)
        from reports import dashboard
        from telemetry.interface import TENANTS_ORDER, add_dashboard_panel

        # The fleet dashboard: the tenants holding and using the most GPU-hours.
        add_dashboard_panel(dashboard.dashboard_panel, order=TENANTS_ORDER)
