from django.db import models
from django.utils.translation import gettext_lazy as _


class PlacementPolicy(models.TextChoices):
    BINPACK = "binpack", _("Binpack (fill cards before using new ones)")
    SPREAD = "spread", _("Spread (balance load across cards and nodes)")


class LeaseState(models.TextChoices):
    ACTIVE = "active", _("Active")
    RELEASED = "released", _("Released")


class AllocationState(models.TextChoices):
    ACTIVE = "active", _("Active")
    # Its card failed, was removed or its node was drained, and no healthy card of the pool
    # could take it: kept and shown, never deleted, until it is re-placed or released.
    STRANDED = "stranded", _("Needs re-placement")
    RELEASED = "released", _("Released")


class AgentSync(models.TextChoices):
    PENDING = "pending", _("Not yet confirmed by the agent")
    CONFIRMED = "confirmed", _("Held by the agent")
    FAILED = "failed", _("Agent did not take it")


# The audit log's actions this app records, as a person reads them (audit.name_actions).
AUDIT_ACTIONS = {
    "pool.create": _("Pool created"),
    "pool.update": _("Pool changed"),
    "pool.delete": _("Pool deleted"),
    "pool.cards_add": _("Cards added to the pool"),
    "pool.cards_remove": _("Cards removed from the pool"),
    "pool_card.cordoned": _("Card cordoned"),
    "pool_card.cordon_cleared": _("Card uncordoned"),
    "allocation.moved": _("Slice moved to another card"),
    "allocation.stranded": _("Slice left without a card"),
    "node.drained": _("Node drained"),
    "node.undrained": _("Node back in service"),
}
