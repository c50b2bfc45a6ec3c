from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QuotasConfig(AppConfig):
    """Tenants, memberships and roles, quotas per pool, GPU requests and their usage."""

    name = "quotas"
    verbose_name = _("Tenants and quotas")

    def ready(self) -> None:
        from audit.interface import name_actions
        from quotas.choices import AUDIT_ACTIONS

        name_actions(AUDIT_ACTIONS)
        # The apps below cannot import this one: they take rules instead. A member sees
        # the process owners on the cards of their tenants' allocations while they held
        # them, and the leases held for their tenants.
        from quotas.requests import dashboard
        from quotas.requests.home import detour
        from quotas.requests.permissions import leases_visible_to, owners_visible_to
        from telemetry.interface import (
            APPROVALS_ORDER,
            add_dashboard_detour,
            add_dashboard_panel,
            grant_owners,
            poll_cycle_recorded,
        )

        grant_owners(owners_visible_to)
        # "/" sends a tenant's member without the fleet's view to their home; after each
        # poll cycle, open homes get their vGPUs' use.
        add_dashboard_detour(detour)
        # The requests waiting for the reader's decision, on the dashboard and the home.
        add_dashboard_panel(dashboard.dashboard_panel, order=APPROVALS_ORDER)
        from quotas.requests.home_live import on_poll_cycle_recorded

        poll_cycle_recorded.connect(on_poll_cycle_recorded, weak=False,
                                    dispatch_uid="quotas.home_live")  # fmt: skip
        # pools.permissions.grant_leases arrives with the pools pages; until then the
        # rule is kept here, unregistered.
        try:
            from pools import permissions as pools_permissions
        except ImportError:
            return
        if hasattr(pools_permissions, "grant_leases"):
            pools_permissions.grant_leases(leases_visible_to)
