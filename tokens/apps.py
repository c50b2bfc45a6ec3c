from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TokensConfig(AppConfig):
    # Personal and service-account API tokens. Above quotas (a service account belongs to a
    # tenant); nothing imports it but the settings, which name its authentication,
    # throttling and login backend classes, and the project's URLs.
    name = "tokens"
    verbose_name = _("API tokens")

    def ready(self) -> None:
        from audit.interface import name_actions
        from tokens.choices import AUDIT_ACTIONS

        name_actions(AUDIT_ACTIONS)
        from django.db.models import Q

        from quotas.interface import set_apart_users
        from tokens import schema  # noqa: F401 (registers the Bearer scheme with the schema)

        # A service account's user is this app's: the Users pages neither list nor change
        # it (reactivating one would undo its disabling).
        set_apart_users(Q(service_account__isnull=False))
