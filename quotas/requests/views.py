"""The GPU request pages: ask, my requests and GPUs, a request's page, the approvals
queue, and the actions on them. Rules live in the services and
``quotas.requests.permissions``; here only who is asking, which form, and where to go next.

The two list pages also answer ``?part=1`` with their live part alone: their script
fetches it when the socket says something changed, so what it shows passes the same
permission check as the page.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from audit.interface import history_of, request_address
from pools.interface import launch_settings
from pools.models import Allocation
from pools.permissions import visible_allocations
from portal.forms import add_service_errors
from quotas import permissions
from quotas.choices import OPEN_STATES, RequestState
from quotas.models import GpuRequest, Notice
from quotas.requests import home as my_home
from quotas.requests import lifecycle
from quotas.requests.forms import DecisionForm, ExtendForm, GpuRequestForm, ResizeForm
from quotas.requests.notices import mark_read, text_of, unread_count
from quotas.requests.outlook import approval_outlook
from quotas.requests.permissions import can_decide, can_manage, decidable_requests, visible_requests
from quotas.requests.services import create_request, decide, queue_position
from telemetry.interface import dashboard_panels


def allocation_url(allocation_id: int) -> str:
    return reverse("pools:allocation_detail", args=[allocation_id])


def _rows(requests) -> list[dict]:
    """Each request with its queue position and its allocations, for the templates."""
    requests = list(requests)
    by_lease: dict[int, list[dict]] = {}
    leases = [r.lease_id for r in requests if r.lease_id]
    for a in Allocation.objects.filter(lease_id__in=leases).select_related("gpu__node"):
        by_lease.setdefault(a.lease_id, []).append({
            "id": a.pk, "url": allocation_url(a.pk), "state": a.get_state_display(),
            "node": a.gpu.node.name if a.gpu else "", "gpu": a.gpu.index if a.gpu else "",
            "model": a.gpu.model if a.gpu else "", "compute_pct": a.compute_pct,
            "memory_mib": a.memory_mib, "active": a.released_at is None,
        })  # fmt: skip
    return [
        {"req": r, "position": queue_position(r), "allocations": by_lease.get(r.lease_id, [])}
        for r in requests
    ]


def _notices(user) -> list[dict]:
    rows = Notice.objects.filter(recipient=user).select_related("gpu_request")[:20]
    return [{"notice": n, "text": text_of(n.kind)} for n in rows]


@login_required
def request_mine(request: HttpRequest) -> HttpResponse:
    mine = visible_requests(request.user).filter(requester=request.user)
    context = {
        "rows": _rows(mine.order_by("-created")[:200]),
        "notices": _notices(request.user),
        "unread": unread_count(request.user),
        "open_states": (RequestState.PENDING, RequestState.APPROVED, RequestState.ALLOCATED),
    }
    template = (
        "quotas/request_mine_part.html" if request.GET.get("part") else "quotas/request_mine.html"
    )
    return render(request, template, context)


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """A developer's home: my vGPUs and their use, my requests, my tenants' quotas left."""
    user = request.user
    context = {
        "vgpus": my_home.my_vgpus(user),
        "rows": my_home.my_requests(user),
        "quotas": my_home.quota_left(user),
        "in_a_tenant": permissions.tenant_ids_of(user).exists(),
        "sees_the_fleet": my_home.sees_the_fleet(user),
        # The dashboard's panels (the firing alerts strip) for those who no longer see it.
        "panels": dashboard_panels(request),
    }
    template = "quotas/home_part.html" if request.GET.get("part") else "quotas/home.html"
    return render(request, template, context)


@login_required
def request_new(request: HttpRequest) -> HttpResponse:
    form = GpuRequestForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            req = create_request(request.user, address=request_address(request), **form.ask())
        except ValidationError as exc:
            add_service_errors(form, exc, fields={"whole_card": "size"})
        else:
            messages.success(request, _("Request %(id)s submitted.") % {"id": req.pk})
            return redirect("requests:request_mine")
    status = 400 if request.method == "POST" else 200
    return render(request, "quotas/request_form.html", {"form": form}, status=status)


def _visible(request: HttpRequest, pk: int) -> GpuRequest:
    req = visible_requests(request.user).filter(pk=pk).first()
    if req is None:
        raise Http404  # another tenant's request is as absent as a missing one
    return req


def _launches(user, req: GpuRequest) -> list[dict]:
    """The launch settings of the request's live vGPUs that ``user`` may open (the vGPU
    page's panel), so the request's page shows them without a click more."""
    if not req.lease_id:
        return []
    allocations = visible_allocations(user).filter(lease_id=req.lease_id, released_at=None)
    found = (launch_settings(a) for a in allocations.select_related("lease", "gpu").order_by("pk"))
    # "key": the panel's blocks' ids stay unique with several vGPUs on one page.
    return [{**launch, "key": f"-{launch['allocation'].pk}"} for launch in found if launch]


def _detail(request: HttpRequest, req: GpuRequest, *, status: int = 200, **forms) -> HttpResponse:
    user = request.user
    context = {
        "row": _rows([req])[0],
        "launches": _launches(user, req),
        "history": history_of(req),
        "can_manage": can_manage(user, req),
        "is_open": req.state in OPEN_STATES,
        "can_decide": can_decide(user, req),
        "extend_form": forms.get("extend_form") or ExtendForm(),
        "resize_form": forms.get("resize_form")
        or ResizeForm(initial={"compute_pct": req.compute_pct, "memory_mib": req.memory_mib}),
        "decision_form": DecisionForm(),
    }
    # ?part=1: the live part alone, which the page's script swaps in on a socket event.
    template = (
        "quotas/request_detail_part.html"
        if request.GET.get("part") and request.method == "GET"
        else "quotas/request_detail.html"
    )
    return render(request, template, context, status=status)


@login_required
def request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return _detail(request, _visible(request, pk))


def _act(request: HttpRequest, req: GpuRequest, action, done: str) -> HttpResponse | None:
    """Run ``action``; None on success (with ``done`` told), else the page with the error."""
    try:
        action()
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from exc
    except ValidationError as exc:
        for text in exc.messages:
            messages.error(request, text)
        return _detail(request, req, status=400)
    messages.success(request, done)
    return None


def _back(request: HttpRequest, req: GpuRequest) -> HttpResponse:
    return redirect("requests:request_detail", req.pk)


@login_required
@require_POST
def request_release(request: HttpRequest, pk: int) -> HttpResponse:
    req = _visible(request, pk)
    done = _("Released.") if req.state == RequestState.ALLOCATED else _("Cancelled.")
    failed = _act(
        request,
        req,
        lambda: lifecycle.release_request(req.pk, request.user, address=request_address(request)),
        done,
    )
    return failed or _back(request, req)


def _form_action(request, req, form, call, done: str, name: str) -> HttpResponse:
    if form.is_valid():
        try:
            call(form.cleaned_data)
        except PermissionError as exc:
            raise PermissionDenied(str(exc)) from exc
        except ValidationError as exc:
            add_service_errors(form, exc)
        else:
            messages.success(request, done)
            return _back(request, req)
    return _detail(request, req, status=400, **{name: form})


@login_required
@require_POST
def request_extend(request: HttpRequest, pk: int) -> HttpResponse:
    req = _visible(request, pk)
    return _form_action(
        request,
        req,
        ExtendForm(request.POST),
        lambda data: lifecycle.extend_request(
            req.pk, request.user, data["hours"], address=request_address(request)
        ),
        _("Extension recorded."),
        "extend_form",
    )


@login_required
@require_POST
def request_resize(request: HttpRequest, pk: int) -> HttpResponse:
    req = _visible(request, pk)
    return _form_action(
        request,
        req,
        ResizeForm(request.POST),
        lambda data: lifecycle.resize_request(
            req.pk, request.user, address=request_address(request), **data
        ),
        _("Resized."),
        "resize_form",
    )


def _approving(request: HttpRequest) -> bool:
    return request.POST.get("decision") == "approve"


@login_required
@require_POST
def request_decide(request: HttpRequest, pk: int) -> HttpResponse:
    req = _visible(request, pk)
    form = DecisionForm(request.POST)
    comment = form.cleaned_data["comment"] if form.is_valid() else ""
    approve = _approving(request)
    failed = _act(
        request,
        req,
        lambda: decide(
            req.pk, request.user, approve=approve, comment=comment, address=request_address(request)
        ),
        _("Approved.") if approve else _("Rejected."),
    )
    if failed:
        return failed
    if request.POST.get("next") == "approvals":
        return redirect("requests:approvals")
    return _back(request, req)


@login_required
@require_POST
def extension_decide(request: HttpRequest, pk: int) -> HttpResponse:
    req = _visible(request, pk)
    form = DecisionForm(request.POST)
    comment = form.cleaned_data["comment"] if form.is_valid() else ""
    approve = _approving(request)
    failed = _act(
        request,
        req,
        lambda: lifecycle.decide_extension(
            req.pk, request.user, approve=approve, comment=comment, address=request_address(request)
        ),
        _("Extension approved.") if approve else _("Extension rejected."),
    )
    return failed or redirect("requests:approvals")


@login_required
def approvals(request: HttpRequest) -> HttpResponse:
    if not permissions.approves_somewhere(request.user):
        raise PermissionDenied
    rows = _rows(decidable_requests(request.user)[:500])
    outlook = approval_outlook(row["req"] for row in rows)
    for row in rows:
        row["outlook"] = outlook.get(row["req"].pk, [])
    context = {"rows": rows, "decision_form": DecisionForm()}
    template = (
        "quotas/approvals_part.html" if request.GET.get("part") else "quotas/approvals_queue.html"
    )
    return render(request, template, context)


@login_required
@require_POST
def notices_read(request: HttpRequest) -> HttpResponse:
    mark_read(request.user)
    return redirect("requests:request_mine")
