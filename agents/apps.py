from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    """Fleet inventory: nodes, their GPUs, and the poller that reads the node agents.

    The node agent program itself lives in ``agents.gpu_agent`` and imports
    nothing from Django.
    """

    name = "agents"
    verbose_name = _("Nodes and GPUs")

    def ready(self) -> None:
        from agents.metrics import FleetCollector
        from portal.metrics import register

        register(FleetCollector())
