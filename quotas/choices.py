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


# The audit log's actions this app records, as a person reads them (audit.name_actions).
AUDIT_ACTIONS = {
    "request.create": _("Asked for GPUs"),
    "request.approve": _("Approved"),
    "request.reject": _("Rejected"),
    "request.place": _("Placed on cards"),
    "request.escalate": _("Escalated: waiting too long"),
    "request.extend": _("Extended"),
    "request.extension_ask": _("Asked for more time"),
    "request.extension_approve": _("Extension approved"),
    "request.extension_reject": _("Extension rejected"),
    "request.resize": _("Resized"),
    "request.released": _("Released"),
    "request.cancelled": _("Cancelled"),
    "request.expired": _("Expired"),
    "tenant.create": _("Tenant created"),
    "tenant.update": _("Tenant changed"),
    "tenant.delete": _("Tenant deleted"),
    "membership.create": _("Member added"),
    "membership.update": _("Member's role changed"),
    "membership.delete": _("Member removed"),
    "quota.create": _("Quota set"),
    "quota.update": _("Quota changed"),
    "quota.delete": _("Quota removed"),
    "user.create": _("User created"),
    "user.deactivate": _("User deactivated"),
    "user.reactivate": _("User reactivated"),
    "user.password_set": _("Password set"),
    "user.password_link": _("Password link sent"),
}
