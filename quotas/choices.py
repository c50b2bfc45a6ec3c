from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    ADMIN = "admin", _("Tenant admin")
    APPROVER = "approver", _("Approver")
    MEMBER = "member", _("Member")


class BudgetPeriod(models.TextChoices):
    MONTH = "month", _("Calendar month")
    ROLLING_30 = "rolling30", _("Rolling 30 days")


class RequestState(models.TextChoices):
    PENDING = "pending", _("Pending approval")
    # Approved and waiting in the pool's queue for capacity.
    APPROVED = "approved", _("Approved, waiting for capacity")
    REJECTED = "rejected", _("Rejected")
    ALLOCATED = "allocated", _("Allocated")
    RELEASED = "released", _("Released")
    EXPIRED = "expired", _("Expired")
    CANCELLED = "cancelled", _("Cancelled")


OPEN_STATES = frozenset({RequestState.PENDING, RequestState.APPROVED, RequestState.ALLOCATED})
