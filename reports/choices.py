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
