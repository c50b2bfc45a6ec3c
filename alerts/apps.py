from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AlertsConfig(AppConfig):
    """Alert rules, events, subscriptions and channels: the top app, fed by signals."""

    name = "alerts"
    verbose_name = _("Alerts")

    def ready(self) -> None:
        from django.db.models.signals import post_delete

        from alerts import event_views
        from alerts.models import Rule
        from alerts.rules import on_rule_deleted
        from alerts.sources import metrics, reclaim, request_notices
        from quotas.interface import request_event
        from reports.interface import appeal_event, idle_digest, reclaim_warned, reclaimed
        from telemetry.interface import (
            ALERTS_ORDER,
            add_dashboard_figures,
            add_dashboard_panel,
            poll_cycle_recorded,
        )

        # A deleted rule leaves every process's copy, cascaded deletes included.
        post_delete.connect(on_rule_deleted, sender=Rule, dispatch_uid="alerts.rule_deleted")
        # Rules are evaluated after each recorded poll cycle, from its readings.
        poll_cycle_recorded.connect(metrics.on_poll_cycle_recorded, weak=False,
                                    dispatch_uid="alerts.rules")  # fmt: skip
        # Each step of a GPU request reaches the people concerned on their channels.
        request_event.connect(request_notices.on_request_event, weak=False,
                              dispatch_uid="alerts.request_notices")  # fmt: skip
        # Reports' news: the reclaim-warning rule's events, reclaim notices, the digest.
        for signal, receiver in ((reclaim_warned, reclaim.on_reclaim_warned),
                                 (reclaimed, reclaim.on_reclaimed),
                                 (appeal_event, reclaim.on_appeal_event),
                                 (idle_digest, reclaim.on_idle_digest)):  # fmt: skip
            signal.connect(receiver, weak=False, dispatch_uid=f"alerts.{receiver.__name__}")
        # Firing events on the fleet dashboard, live over /ws/alerts/.
        add_dashboard_panel(event_views.dashboard_panel, order=ALERTS_ORDER)
        add_dashboard_figures(event_views.dashboard_figures)
