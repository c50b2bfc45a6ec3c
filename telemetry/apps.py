from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TelemetryConfig(AppConfig):
    """The poll pipeline: readings, history, live pages; used through ``telemetry.interface``."""

    name = "telemetry"
    verbose_name = _("Telemetry")

    def ready(self) -> None:
        from portal.metrics import register
        from telemetry.metrics import FleetCollector

        register(FleetCollector())
