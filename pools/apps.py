from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PoolsConfig(AppConfig):
    """Pools of cards, vGPU slices and placement; used through ``pools.interface``."""

    name = "pools"
    verbose_name = _("Pools")

    def ready(self) -> None:
        from audit.interface import name_actions
        from pools.choices import AUDIT_ACTIONS

        name_actions(AUDIT_ACTIONS)
        from pools import dashboard, receivers
        from pools.metrics import PoolsCollector
        from pools.signals import desired_state_changed
        from portal.metrics import register
        from telemetry.interface import (
            POOLS_ORDER,
            add_dashboard_figures,
            add_dashboard_panel,
            poll_cycle_recorded,
        )

        desired_state_changed.connect(receivers.on_desired_state_changed, weak=False,
                                      dispatch_uid="pools.sync")  # fmt: skip
        poll_cycle_recorded.connect(receivers.on_poll_cycle_recorded, weak=False,
                                    dispatch_uid="pools.poll_cycle")  # fmt: skip
        # The pool pages: new cards join rule pools, watched pages get readings (and their
        # news after a placement from on_desired_state_changed).
        poll_cycle_recorded.connect(receivers.on_poll_cycle_for_pools, weak=False,
                                    dispatch_uid="pools.cards_and_live")  # fmt: skip
        register(PoolsCollector())
        # The fleet dashboard: capacity bars in cards, and the allocated cards' count.
        add_dashboard_panel(dashboard.dashboard_panel, order=POOLS_ORDER)
        add_dashboard_figures(dashboard.dashboard_figures)
