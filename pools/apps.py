from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PoolsConfig(AppConfig):
    """Pools of cards, vGPU slices and placement; used through ``pools.interface``."""

    name = "pools"
    verbose_name = _("Pools")

    def ready(self) -> None:
        from pools import receivers
        from pools.signals import desired_state_changed
        from telemetry.interface import poll_cycle_recorded

        poll_cycle_recorded.connect(receivers.on_poll_cycle, dispatch_uid="pools.poll_cycle")
        desired_state_changed.connect(
            receivers.on_desired_state_changed, dispatch_uid="pools.desired_live"
        )
