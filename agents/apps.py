from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AgentsConfig(AppConfig):
    """Fleet inventory: nodes, their GPUs, their registration, and the client that speaks to
    node agents.

    The node agent program itself lives in ``agents.gpu_agent`` and imports nothing from
    Django. Readings, history and live pages are the ``telemetry`` app's, above this one.
    """

    name = "agents"
    verbose_name = _("Nodes and GPUs")

    def ready(self) -> None:
        # Every pool of the agent client (the poller's, the connection test's) checks the
        # addresses it connects to against the settings' agent networks.
        from agents import networks
        from portal import egress

        egress.set_default_policy(networks.policy)
