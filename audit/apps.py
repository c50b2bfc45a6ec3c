from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class AuditConfig(AppConfig):
    # The bottom of the house beside agents: every app records here, it imports none.
    name = "audit"
    verbose_name = _("Audit log")

    def ready(self) -> None:
        from axes.signals import user_locked_out
        from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed

        from audit import logins

        user_logged_in.connect(logins.logged_in, dispatch_uid="audit.login")
        user_logged_out.connect(logins.logged_out, dispatch_uid="audit.logout")
        user_login_failed.connect(logins.login_failed, dispatch_uid="audit.login_failed")
        user_locked_out.connect(logins.locked_out, dispatch_uid="audit.locked_out")
