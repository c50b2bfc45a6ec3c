from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QuotasConfig(AppConfig):
    """Tenants, memberships and roles, quotas per pool, GPU requests and their usage."""

    name = "quotas"
    verbose_name = _("Tenants and quotas")

    def ready(self) -> None:
        # The apps below cannot import this one: they take rules instead. A member sees
        # the process owners on the cards of their tenants' allocations while they held
        # them, and the leases held for their tenants.
        from quotas.requests.permissions import leases_visible_to, owners_visible_to
        from telemetry.interface import grant_owners

        grant_owners(owners_visible_to)
        # pools.permissions.grant_leases arrives with the pools pages; until then the
        # rule is kept here, unregistered.
        try:
            from pools import permissions as pools_permissions
        except ImportError:
            return
        if hasattr(pools_permissions, "grant_leases"):
            pools_permissions.grant_leases(leases_visible_to)
