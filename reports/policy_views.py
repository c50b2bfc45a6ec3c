"""The platform admins' pages for the pools' reclaim policies (linked from the idle
report) and the unit prices (linked from the accounting): list, add, edit, delete. The
rules and the audit are ``reports.policies``; anyone else is refused (403)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from audit.interface import request_address
from pools.models import Pool
from portal.forms import add_service_errors
from reports import permissions, policies
from reports.forms import ReclaimPolicyForm, UnitPriceForm
from reports.models import ReclaimPolicy, UnitPrice


def _platform_admin_only(request: HttpRequest) -> None:
    if not permissions.can_set_policies(request.user):
        raise PermissionDenied


def _run(form, service: Callable[..., Any], *args, **kwargs) -> Any:
    """Call a service; its field errors land on the form (None is returned then)."""
    try:
        return service(*args, **kwargs)
    except ValidationError as exc:
        add_service_errors(form, exc)
    except PermissionError:
        raise PermissionDenied from None
    return None


# --- reclaim policies --------------------------------------------------------------------


@login_required
def policy_list(request: HttpRequest) -> HttpResponse:
    _platform_admin_only(request)
    found = {p.pool_id: p for p in ReclaimPolicy.objects.all()}
    rows = [(pool, found.get(pool.pk)) for pool in Pool.objects.order_by("name")]
    context = {"rows": rows, "defaults": ReclaimPolicy(), "section": "idle"}
    return render(request, "reports/policy_list.html", context)


@login_required
def policy_add(request: HttpRequest) -> HttpResponse:
    _platform_admin_only(request)
    initial = {"pool": request.GET.get("pool")} if request.GET.get("pool", "").isdigit() else {}
    form = ReclaimPolicyForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        policy = _run(form, policies.create_policy, request.user,
                      address=request_address(request), **form.cleaned_data)  # fmt: skip
        if policy is not None:
            messages.success(request, _("Reclaim policy of %(pool)s saved.") % {"pool": policy})
            return redirect("reports:policy_list")
    return render(request, "reports/policy_form.html", {"form": form, "policy": None})


@login_required
def policy_edit(request: HttpRequest, pk: int) -> HttpResponse:
    _platform_admin_only(request)
    policy = get_object_or_404(ReclaimPolicy.objects.select_related("pool"), pk=pk)
    form = ReclaimPolicyForm(request.POST or None, policy=policy)
    if request.method == "POST" and form.is_valid():
        saved = _run(form, policies.update_policy, policy.pk, request.user,
                     address=request_address(request), **form.cleaned_data)  # fmt: skip
        if saved is not None:
            messages.success(request, _("Reclaim policy of %(pool)s saved.") % {"pool": saved})
            return redirect("reports:policy_list")
    return render(request, "reports/policy_form.html", {"form": form, "policy": policy})


@require_POST
@login_required
def policy_delete(request: HttpRequest, pk: int) -> HttpResponse:
    _platform_admin_only(request)
    policy = get_object_or_404(ReclaimPolicy.objects.select_related("pool"), pk=pk)
    policies.delete_policy(policy.pk, request.user, address=request_address(request))
    messages.success(
        request,
        _("Reclaim policy of %(pool)s removed: it uses the defaults and never reclaims.")
        % {"pool": policy},
    )
    return redirect("reports:policy_list")


# --- unit prices -------------------------------------------------------------------------


@login_required
def price_list(request: HttpRequest) -> HttpResponse:
    _platform_admin_only(request)
    prices = list(UnitPrice.objects.select_related("pool").order_by("pool__name"))
    default = next((p for p in prices if p.pool_id is None), None)
    context = {
        "default": default,
        "prices": [p for p in prices if p.pool_id is not None],
        "unpriced": Pool.objects.filter(unit_price__isnull=True).order_by("name"),
        "section": "accounting",
    }
    return render(request, "reports/price_list.html", context)


@login_required
def price_add(request: HttpRequest) -> HttpResponse:
    _platform_admin_only(request)
    initial = {"pool": request.GET.get("pool")} if request.GET.get("pool", "").isdigit() else {}
    form = UnitPriceForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        price = _run(form, policies.create_price, request.user,
                     address=request_address(request), **form.cleaned_data)  # fmt: skip
        if price is not None:
            messages.success(request, _("Price of %(pool)s saved.") % {"pool": price})
            return redirect("reports:price_list")
    return render(request, "reports/price_form.html", {"form": form, "price": None})


@login_required
def price_edit(request: HttpRequest, pk: int) -> HttpResponse:
    _platform_admin_only(request)
    price = get_object_or_404(UnitPrice.objects.select_related("pool"), pk=pk)
    form = UnitPriceForm(request.POST or None, price=price)
    if request.method == "POST" and form.is_valid():
        saved = _run(form, policies.update_price, price.pk, request.user,
                     address=request_address(request), **form.cleaned_data)  # fmt: skip
        if saved is not None:
            messages.success(request, _("Price of %(pool)s saved.") % {"pool": saved})
            return redirect("reports:price_list")
    return render(request, "reports/price_form.html", {"form": form, "price": price})


@require_POST
@login_required
def price_delete(request: HttpRequest, pk: int) -> HttpResponse:
    _platform_admin_only(request)
    price = get_object_or_404(UnitPrice.objects.select_related("pool"), pk=pk)
    policies.delete_price(price.pk, request.user, address=request_address(request))
    messages.success(request, _("Price of %(pool)s removed.") % {"pool": price})
    return redirect("reports:price_list")
