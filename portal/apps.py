from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("GPU Portal")

    def ready(self) -> None:
        from portal import lookups  # noqa: F401 (registers field__any)
