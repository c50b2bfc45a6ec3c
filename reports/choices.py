from django.db import models
from django.utils.translation import gettext_lazy as _


class WarningState(models.TextChoices):
    """A reclaim warning's steps: warned -> (appealed -> granted / refused) -> released;
    or withdrawn when the allocation is busy again, exempted or released by its owner."""

    WARNED = "warned", _("Warned")
    APPEALED = "appealed", _("Appeal waiting for an approver")
    GRANTED = "granted", _("Appeal granted")
    RELEASED = "released", _("Reclaimed")
    WITHDRAWN = "withdrawn", _("Withdrawn")


class WarningCause(models.TextChoices):
    """Why a lease is taken back: it sat idle, or it was borrowed above its tenant's
    guarantee and another tenant within its guarantee waits for the capacity."""

    IDLE = "idle", _("Idle")
    BORROWED = "borrowed", _("Borrowed capacity needed")


OPEN_WARNINGS = (WarningState.WARNED, WarningState.APPEALED)


class CardState(models.TextChoices):
    """What an idle-report card row says of a physical card."""

    UNALLOCATED = "unallocated", _("No allocation")
    IDLE = "idle", _("Allocated, unused")
    FOREIGN = "foreign", _("Used outside any allocation")


# The audit log's actions this app records, as a person reads them (audit.name_actions).
AUDIT_ACTIONS = {
    "reclaim.warn": _("Idle: warned before reclaim"),
    "reclaim.warned": _("Idle: warned before reclaim"),
    "reclaim.appeal": _("Appealed the reclaim"),
    "reclaim.appealed": _("Appealed the reclaim"),
    "reclaim.appeal_grant": _("Appeal granted"),
    "reclaim.granted": _("Appeal granted"),
    "reclaim.appeal_refuse": _("Appeal refused"),
    "reclaim.exempt": _("Exempted from reclaim"),
    "reclaim.exempt_end": _("Exemption ended"),
    "reclaim.release": _("Reclaimed"),
    "reclaim.released": _("Reclaimed"),
    "reclaim.withdrawn": _("Reclaim warning withdrawn"),
    "reclaim.refused": _("Appeal refused"),
    "reclaim.take_back": _("Borrowed capacity taken back"),
    "reclaim_policy.create": _("Reclaim policy created"),
    "reclaim_policy.update": _("Reclaim policy changed"),
    "reclaim_policy.delete": _("Reclaim policy deleted"),
    "unit_price.create": _("Price set"),
    "unit_price.update": _("Price changed"),
    "unit_price.delete": _("Price removed"),
}
