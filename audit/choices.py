from django.db import models
from django.utils.translation import gettext_lazy as _


class AuditAction(models.TextChoices):
    """The actions this app and the node registration record. Other apps name their own
    (``request.approved``, ``quota.updated``...): the column is free text, ``<object>.<verb>``."""

    LOGIN = "login.succeeded", _("Login")
    LOGIN_FAILED = "login.failed", _("Failed login")
    LOGIN_LOCKED_OUT = "login.locked_out", _("Login locked out")
    LOGOUT = "logout", _("Logout")
    API_TOKEN_LOCKED_OUT = "api_token.locked_out", _("API token guessing locked out")
    NODE_CREATED = "node.created", _("Node added")
    NODE_UPDATED = "node.updated", _("Node changed")
    NODE_DELETED = "node.deleted", _("Node deleted")
