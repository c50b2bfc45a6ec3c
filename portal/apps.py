from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = _("GPU Portal")

    def ready(self) -> None:
        from axes.signals import user_locked_out
        from django.contrib.auth.signals import user_login_failed

        from portal import lookups, security  # noqa: F401 (lookups registers field__any)

        user_login_failed.connect(security.log_failed_login, dispatch_uid="portal.failed_login")
        user_locked_out.connect(security.log_lockout, dispatch_uid="portal.lockout")
