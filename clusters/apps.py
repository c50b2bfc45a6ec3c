from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class ClustersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "clusters"
    verbose_name = _("Kubernetes clusters")

    def ready(self) -> None:
        from audit.interface import name_actions
        from clusters.choices import AUDIT_ACTIONS

        name_actions(AUDIT_ACTIONS)
        from clusters import receivers  # noqa: F401  (a quota change syncs its pool's clusters)
