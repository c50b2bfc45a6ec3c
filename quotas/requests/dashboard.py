"""The requests' panel of the fleet dashboard: requests (and extensions) waiting for the
reader's decision, oldest first, for those who approve somewhere (registered in
``QuotasConfig.ready``). Two queries: the count and the few shown."""

from __future__ import annotations

from django.http import HttpRequest
from django.template.loader import render_to_string

from quotas.permissions import approves_somewhere
from quotas.requests.permissions import decidable_requests

# The panel lists this many; the approvals queue has them all.
SHOWN = 5


def waiting(user, limit: int = SHOWN) -> tuple[list, int]:
    """The oldest ``limit`` requests ``user`` may decide, and how many wait in all."""
    rows = decidable_requests(user)
    shown = list(rows.select_related("requester", "tenant", "pool")[:limit])
    return shown, (len(shown) if len(shown) < limit else rows.count())


def dashboard_panel(request: HttpRequest) -> str:
    if not approves_somewhere(request.user):
        return ""
    shown, total = waiting(request.user)
    return render_to_string(
        "quotas/_approvals_panel.html", {"waiting": shown, "total": total}, request=request
    )
