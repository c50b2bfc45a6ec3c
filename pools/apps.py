from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PoolsConfig(AppConfig):
    name = "pools"
    verbose_name = _("Pools")

    def ready(self) -> None:
        from pools import receivers
        from pools.metrics import PoolsCollector
        from pools.signals import desired_state_changed
        from portal.metrics import register
        from telemetry.interface import poll_cycle_recorded

        desired_state_changed.connect(receivers.on_desired_state_changed, weak=False,
                                      dispatch_uid="pools.sync")  # fmt: skip
        poll_cycle_recorded.connect(receivers.on_poll_cycle_recorded, weak=False,
                                    dispatch_uid="pools.poll_cycle")  # fmt: skip
        register(PoolsCollector())
