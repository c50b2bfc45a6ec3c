from django.db import models
from django.utils.translation import gettext_lazy as _


class Scope(models.TextChoices):
    READ = "read", _("Read only")
    WRITE = "write", _("Read and write")


# The audit log's actions this app records, as a person reads them (audit.name_actions).
AUDIT_ACTIONS = {
    "api_token.created": _("API token created"),
    "api_token.revoked": _("API token revoked"),
    "service_account.created": _("Service account created"),
    "service_account.disabled": _("Service account disabled"),
}
