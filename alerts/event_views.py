"""Event pages: the history with filters and pages, one event with its deliveries and
every attempt, acknowledge and resolve, and the dashboard's strip of firing events.

Who sees which events is who would be sent them (alerts.permissions.visible_events), as
in the API; another tenant's event is 404. Acknowledging and resolving: platform events
by platform admins and node operators, a tenant's by its admins and approvers (403 for
others who see it); an event not in a state that allows the step is 409.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import InvalidPage, Paginator
from django.db.models import Case, Count, Max, Prefetch, When
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from alerts import events
from alerts.choices import EventState, Severity
from alerts.defaults import rule_label
from alerts.filtersets import EventFilterSet
from alerts.models import DeliveryAttempt, Event
from alerts.permissions import can_acknowledge, visible_channels, visible_events, visible_rules
from audit.interface import request_address
from quotas.permissions import visible_tenants
from telemetry.interface import DashboardFigure

PAGE_SIZE = 50
STRIP_SIZE = 10
RECENT_SIZE = 5


def _visible(request: HttpRequest):
    return visible_events(request.user).select_related("tenant", "acknowledged_by")


@login_required
def event_list(request: HttpRequest) -> HttpResponse:
    filters = EventFilterSet(request.GET or None, queryset=_visible(request))
    status = 200
    if filters.is_bound and not filters.is_valid():
        rows, status = Event.objects.none(), 400
    else:
        rows = filters.qs.order_by("-started_at", "-pk")
    paginator = Paginator(rows, PAGE_SIZE)
    try:
        page = paginator.page(request.GET.get("page") or 1)
    except InvalidPage:
        raise Http404(_("No such page of events.")) from None
    query = request.GET.copy()
    query.pop("page", None)
    user = request.user
    tenants = visible_tenants(user)
    context = {
        "filters": filters, "page": page, "query": query.urlencode(),
        "states": EventState.choices, "severities": Severity.choices,
        "chosen_states": request.GET.getlist("state"),
        "chosen_severities": request.GET.getlist("severity"),
        "rules": visible_rules(user).order_by("name"), "tenants": tenants.order_by("name"),
    }  # fmt: skip
    return render(request, "alerts/events/list.html", context, status=status)


@login_required
def event_detail(request: HttpRequest, pk: int) -> HttpResponse:
    event = get_object_or_404(_visible(request), pk=pk)
    return _detail(request, event)


def _detail(request: HttpRequest, event: Event, status: int = 200) -> HttpResponse:
    # Deliveries to channels the reader manages (all for the platform admin): another
    # person's channel is theirs to know about.
    deliveries = (
        event.deliveries.filter(channel__in=visible_channels(request.user))
        .select_related("channel")
        .prefetch_related(
            Prefetch("attempt_log", queryset=DeliveryAttempt.objects.order_by("number"))
        )
        .order_by("-created", "-pk")
    )
    context = {"event": event, "deliveries": deliveries,
               "can_act": can_acknowledge(request.user, event),
               "labels": sorted((event.labels or {}).items())}  # fmt: skip
    return render(request, "alerts/events/detail.html", context, status=status)


def _step(request: HttpRequest, pk: int, step, done: str) -> HttpResponse:
    event = get_object_or_404(_visible(request), pk=pk)
    if not can_acknowledge(request.user, event):
        raise PermissionDenied(_("Only who answers for this event may change it."))
    if not step(event.pk, actor=request.user, address=request_address(request)):
        messages.error(request, _("The event is not in a state that allows this."))
        return _detail(request, event, status=409)
    messages.success(request, done)
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, {request.get_host()},
                                           require_https=request.is_secure()):  # fmt: skip
        target = event.get_absolute_url()
    return redirect(target)


@login_required
@require_POST
def event_acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    return _step(request, pk, events.acknowledge, _("Event acknowledged."))


@login_required
@require_POST
def event_resolve(request: HttpRequest, pk: int) -> HttpResponse:
    return _step(request, pk, events.resolve_by_hand, _("Event resolved."))


@dataclass(frozen=True)
class FiringGroup:
    """The strip's row: one rule's firing events, as Alertmanager groups them ("22 x GPU
    process without an allocation"), so one noisy rule cannot push the others out."""

    rule_id: int | None
    rule_label: str
    severity: str
    severity_label: str
    count: int
    latest: datetime
    event: Event | None  # the one event, when the rule has only one firing

    @property
    def url(self) -> str:
        if self.event is not None:
            return self.event.get_absolute_url()
        query = f"?state={EventState.FIRING}"
        return reverse("alerts:event_list") + (f"{query}&rule={self.rule_id}" if self.rule_id
                                               else query)  # fmt: skip


def firing_groups(request: HttpRequest) -> list[FiringGroup]:
    """The STRIP_SIZE rules with firing events the reader may see, most severe first,
    then newest. Two queries, whatever the count of events."""
    firing = _visible(request).filter(state=EventState.FIRING)
    rank = Case(When(severity=Severity.CRITICAL, then=0), When(severity=Severity.WARNING, then=1),
                default=2)  # fmt: skip
    rows = list(
        firing.values("rule_id", "rule_key", "rule_name", "severity")
        .annotate(count=Count("pk"), latest=Max("started_at"), newest=Max("pk"), rank=rank)
        .order_by("rank", "-latest")[:STRIP_SIZE]
    )
    singles = Event.objects.in_bulk([r["newest"] for r in rows if r["count"] == 1])
    labels = dict(Severity.choices)
    return [
        FiringGroup(
            rule_id=r["rule_id"],
            rule_label=rule_label(r["rule_key"], r["rule_name"]),
            severity=r["severity"],
            severity_label=labels.get(r["severity"], r["severity"]),
            count=r["count"],
            latest=r["latest"],
            event=singles.get(r["newest"]),
        )
        for r in rows
    ]


def recent_events(request: HttpRequest, limit: int = RECENT_SIZE) -> list[Event]:
    """The newest events the reader may see, whatever their state: what happened lately."""
    return list(_visible(request).order_by("-started_at", "-pk")[:limit])


def _strip(request: HttpRequest) -> dict:
    return {"firing": firing_groups(request), "recent": recent_events(request)}


@login_required
def firing_strip(request: HttpRequest) -> HttpResponse:
    """The dashboard strip's list, fetched again when the socket says something changed."""
    return render(request, "alerts/events/_firing.html", _strip(request))


def dashboard_panel(request: HttpRequest) -> str:
    """The strip on the fleet dashboard (registered with telemetry in AppConfig.ready)."""
    if not request.user.is_authenticated:
        return ""
    return render_to_string("alerts/events/_dashboard_panel.html", _strip(request),
                            request=request)  # fmt: skip


def dashboard_figures(request: HttpRequest) -> list[DashboardFigure]:
    """The summary row's count of firing events the reader may see, and of their rules."""
    if not request.user.is_authenticated:
        return []
    counted = (
        _visible(request)
        .filter(state=EventState.FIRING)
        .aggregate(events=Count("pk"), rules=Count("rule_key", distinct=True))
    )
    rules = counted["rules"]
    detail = ngettext("from %(count)s rule", "from %(count)s rules", rules) % {"count": rules}
    url = reverse("alerts:event_list") + f"?state={EventState.FIRING}"
    return [DashboardFigure(_("Alerts firing"), str(counted["events"]), url=url, order=50,
                            detail=detail if rules else _("Nothing is firing."),
                            tone="danger" if counted["events"] else "")]  # fmt: skip
