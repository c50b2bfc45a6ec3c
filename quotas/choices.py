from django.db import models
from django.utils.translation import gettext_lazy as _


class Role(models.TextChoices):
    ADMIN = "admin", _("Tenant admin")
    APPROVER = "approver", _("Approver")
    MEMBER = "member", _("Member")


# The roles that decide a tenant's GPU requests (and its alerts, exemptions, appeals).
DECIDING_ROLES = (Role.ADMIN, Role.APPROVER)


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


class NoticeKind(models.TextChoices):
    """A step of a request someone is told about (quotas.requests.notices words each one)."""

    CREATED = "created", _("Request submitted")
    APPROVED = "approved", _("Approved")
    AUTO_APPROVED = "auto_approved", _("Approved automatically")
    REJECTED = "rejected", _("Rejected")
    PLACED = "placed", _("GPUs placed")
    ESCALATED = "escalated", _("Waiting too long for approval")
    PENDING_EXPIRED = "pending_expired", _("Expired without a decision")
    EXPIRING = "expiring", _("Expires soon")
    EXPIRED = "expired", _("Expired")
    RELEASED = "released", _("Released")
    CANCELLED = "cancelled", _("Cancelled")
    EXTENDED = "extended", _("Extended")
    EXTENSION_ASKED = "extension_asked", _("Extension waiting for approval")
    EXTENSION_REJECTED = "extension_rejected", _("Extension rejected")
    RESIZED = "resized", _("Resized")
    # Borrowed capacity (reports' take-back): the lender is warned; the waiting one told.
    TAKE_BACK = "take_back", _("Borrowed GPUs to be taken back")
    TAKING_BACK = "taking_back", _("Borrowed capacity being taken back for you")
