"""The idle report page (with its CSV), the reclaim actions on it, and the monthly
accounting page. Rows come from ``reports.report`` (narrowed by ``reports.permissions``);
the changes from ``reports.services``."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from audit.interface import request_address
from reports import accounting, permissions, report, services
from reports.filtersets import AllocationIdleFilterSet
from reports.forms import AppealDecisionForm, AppealForm, ExemptionForm

PAGE_SIZE = 100


@login_required
def idle_report(request: HttpRequest) -> HttpResponse:
    filters = AllocationIdleFilterSet(
        request.GET, queryset=report.visible_rows(request.user), request=request
    )
    if not filters.is_valid():
        context = {"filters": filters, "page": None, "cards": [], "section": "idle"}
        return render(request, "reports/idle_report.html", context, status=400)
    rows = filters.qs
    if request.GET.get("format") == "csv":
        response = StreamingHttpResponse(
            report.csv_lines(rows.iterator(chunk_size=2000)), content_type="text/csv"
        )
        response["Content-Disposition"] = 'attachment; filename="idle-report.csv"'
        return response
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = report.decorate(page.object_list, request.user)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "filters": filters, "page": page, "query": query.urlencode(),
        "idle_rows": [r for r in page.object_list if r.idle],
        "busy_rows": [r for r in page.object_list if not r.idle],
        "cards": list(report.visible_cards(request.user)[:500]),
        "user_id": request.user.pk, "section": "idle",
        "appeal_form": AppealForm(), "decision_form": AppealDecisionForm(),
        "exemption_form": ExemptionForm(),
        "may_set_policies": permissions.can_set_policies(request.user),
    }  # fmt: skip
    return render(request, "reports/idle_report.html", context)


def _act(request: HttpRequest, fn, *args, **kwargs) -> HttpResponse:
    try:
        fn(*args, **kwargs, address=request_address(request))
    except PermissionError:
        return HttpResponse(status=404)  # as absent: nothing of others' leases leaks
    except ValidationError as exc:
        errors = "; ".join(" ".join(v) for v in exc.message_dict.values())
        return HttpResponse(errors, status=400, content_type="text/plain; charset=utf-8")
    messages.success(request, _("Done."))
    return redirect("reports:idle_report")


@login_required
@require_POST
def warning_appeal(request: HttpRequest, pk: int) -> HttpResponse:
    form = AppealForm(request.POST)
    if not form.is_valid():
        return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
    return _act(request, services.appeal, pk, request.user, reason=form.cleaned_data["reason"])


@login_required
@require_POST
def warning_decide(request: HttpRequest, pk: int) -> HttpResponse:
    form = AppealDecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
    data = form.cleaned_data
    return _act(request, services.decide_appeal, pk, request.user, grant=data["grant"],
                comment=data["comment"], until=data["until"])  # fmt: skip


@login_required
@require_POST
def lease_exempt(request: HttpRequest, pk: int) -> HttpResponse:
    form = ExemptionForm(request.POST)
    if not form.is_valid():
        return HttpResponse(form.errors.as_text(), status=400, content_type="text/plain")
    data = form.cleaned_data
    return _act(request, services.add_exemption, pk, request.user, reason=data["reason"],
                ends_at=data["ends_at"])  # fmt: skip


@login_required
def accounting_report(request: HttpRequest) -> HttpResponse:
    try:
        month = accounting.parse_month(request.GET.get("month"))
    except ValidationError as exc:
        return render(request, "reports/accounting.html",
                      {"errors": exc.messages, "section": "accounting"}, status=400)  # fmt: skip
    data = accounting.monthly(month, request.user)
    if request.GET.get("format") == "csv":
        response = HttpResponse(accounting.csv_text(data), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="accounting-{month:%Y-%m}.csv"'
        return response
    labels = {"held": _("held"), "used": _("used"), "idle": _("idle"), "unit": _("GPU-hours"),
              "day": _("Day")}  # fmt: skip
    context = {
        "data": data, "chart_labels": labels, "section": "accounting",
        "may_set_policies": permissions.can_set_policies(request.user),
    }  # fmt: skip
    return render(request, "reports/accounting.html", context)
