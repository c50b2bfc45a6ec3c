"""Tenant pages: the list with usage bars, a tenant's members, quotas and usage, member
management for tenant admins, tenant and quota forms for platform admins.

A tenant the user may not see is 404 (its name never shows); one they see but may not
change is 403. The rules are ``quotas.permissions``; the changes ``services``.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from audit.interface import request_address
from portal.forms import add_service_errors
from quotas import permissions
from quotas.choices import Role
from quotas.models import Membership, Quota, Tenant
from quotas.tenancy import services
from quotas.tenancy.forms import MemberAddForm, MemberRoleForm, QuotaForm, TenantAddForm, TenantForm
from quotas.tenancy.usage import QuotaUsage, quota_usage
from quotas.tenancy.user_views import keep_password_link, pop_password_link

DIMENSION_LABELS = {
    "vgpus": gettext_lazy("vGPUs"),
    "compute_pct": gettext_lazy("Compute (%)"),
    "memory_mib": gettext_lazy("Memory (MiB)"),
    "gpu_hours": gettext_lazy("GPU-hours"),
}


def _visible_tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = get_object_or_404(Tenant, slug=slug)
    if not permissions.can_view_tenant(request.user, tenant):
        raise Http404
    return tenant


def _has_admin(tenant: Tenant) -> bool:
    # Tenants made before their first admin was required may have none (or only
    # deactivated ones): their pages say so to those who can add one.
    return tenant.memberships.admins().active().exists()


def _pct(part: int | Decimal, whole: int) -> float:
    return round(min(float(part) / whole * 100, 100.0), 1) if whole > 0 else 0.0


def bars(usage: QuotaUsage) -> list[dict[str, Any]]:
    """Per dimension: the numbers and the bar's two parts as percents of the limit, the
    part within the guarantee and the part borrowed above it."""
    out = []
    for key, used, guarantee, limit in usage.dimensions():
        within = min(used, guarantee)
        out.append(
            {
                "key": key,
                "label": DIMENSION_LABELS[key],
                "used": used,
                "guarantee": guarantee,
                "limit": limit,
                "within_pct": _pct(within, limit),
                "borrowed_pct": _pct(max(min(used, limit) - within, 0), limit),
                "over": used > limit,
            }
        )
    return out


def _quota_rows(usages: list[QuotaUsage]) -> dict[int, list[dict[str, Any]]]:
    rows: dict[int, list[dict[str, Any]]] = {}
    for usage in usages:
        rows.setdefault(usage.quota.tenant_id, []).append(
            {"quota": usage.quota, "usage": usage, "bars": bars(usage)}
        )
    return rows


@login_required
def tenant_list(request: HttpRequest) -> HttpResponse:
    tenants = list(permissions.visible_tenants(request.user).order_by("name"))
    rows = _quota_rows(quota_usage([t.pk for t in tenants]))
    roles = dict(Membership.objects.of(request.user).values_list("tenant_id", "role"))
    entries = [
        {
            "tenant": t,
            "quotas": rows.get(t.pk, []),
            "role": Role(roles[t.pk]).label if t.pk in roles else None,
        }
        for t in tenants
    ]
    context = {
        "entries": entries,
        "may_create": permissions.can_manage_tenant(request.user),
    }
    return render(request, "quotas/tenant_list.html", context)


@login_required
@never_cache  # it may show a new admin's set-password link, once
def tenant_detail(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = _visible_tenant(request, slug)
    usages = quota_usage([tenant.pk], members=True)
    members = list(tenant.memberships.select_related("user").order_by("user__username"))
    names = {m.user_id: m.user.get_username() for m in members}
    # Former members who still hold GPUs are shown too.
    holders = {uid for usage in usages for uid in usage.members} - set(names)
    names.update(get_user_model().objects.filter(pk__in=holders).values_list("pk", "username"))
    member_usage = [
        {
            "pool": usage.quota.pool,
            "rows": [
                {"name": names.get(uid, ""), "usage": used}
                for uid, used in sorted(usage.members.items(), key=lambda i: names.get(i[0], ""))
            ],
        }
        for usage in usages
        if usage.members
    ]
    context = {
        "tenant": tenant,
        "members": members,
        "quotas": _quota_rows(usages).get(tenant.pk, []),
        "member_usage": member_usage,
        "role": Role(role).label if (role := permissions.role_in(request.user, tenant)) else None,
        "may_manage_tenant": permissions.can_manage_tenant(request.user, tenant),
        "may_manage_members": permissions.can_manage_members(request.user, tenant),
        "password_link": pop_password_link(request, f"tenant:{tenant.pk}"),
        "has_admin": _has_admin(tenant),
    }
    return render(request, "quotas/tenant_detail.html", context)


def _platform_admin_only(request: HttpRequest) -> None:
    if not permissions.can_manage_tenant(request.user):
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


@login_required
def tenant_add(request: HttpRequest) -> HttpResponse:
    """A tenant with its first admin; a new admin's set-password link is shown once on the
    tenant's page."""
    _platform_admin_only(request)
    form = TenantAddForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        arguments = form.service_arguments()
        tenant = _run(form, services.create_tenant, request.user, address=request_address(request),
                      **arguments)  # fmt: skip
        if tenant is not None:
            messages.success(request, _("Tenant %(name)s created.") % {"name": tenant.name})
            if arguments["new_admin"] is not None:
                admin = tenant.memberships.admins().select_related("user").get().user
                keep_password_link(request, f"tenant:{tenant.pk}", admin)
            return redirect(tenant)
    return render(request, "quotas/tenant_form.html", {"form": form, "tenant": None})


@login_required
def tenant_edit(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = _visible_tenant(request, slug)
    _platform_admin_only(request)
    form = TenantForm(request.POST or None, tenant=tenant)
    if request.method == "POST" and form.is_valid():
        saved = _run(form, services.update_tenant, tenant.pk, request.user,
                     address=request_address(request), **form.cleaned_data)  # fmt: skip
        if saved is not None:
            messages.success(request, _("Tenant %(name)s saved.") % {"name": saved.name})
            return redirect(saved)
    return render(request, "quotas/tenant_form.html", {"form": form, "tenant": tenant})


@login_required
@never_cache  # it may show a new member's set-password link, once
def tenant_members(request: HttpRequest, slug: str) -> HttpResponse:
    """Add members and change or remove them: the tenant's admins and platform admins."""
    tenant = _visible_tenant(request, slug)
    if not permissions.can_manage_members(request.user, tenant):
        raise PermissionDenied
    form = MemberAddForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        arguments = form.service_arguments()
        added = _run(form, services.add_member, tenant.pk, request.user,
                     address=request_address(request), **arguments)  # fmt: skip
        if added is not None:
            messages.success(request, _("%(user)s added.") % {"user": added.user.get_username()})
            if arguments["new_user"] is not None:
                keep_password_link(request, f"members:{tenant.pk}", added.user)
            return redirect("quotas:tenant_members", tenant.slug)
    members = tenant.memberships.select_related("user").order_by("user__username")
    rows = [(m, MemberRoleForm(initial={"role": m.role}, prefix=f"m{m.pk}")) for m in members]
    context = {
        "tenant": tenant, "form": form, "rows": rows,
        "password_link": pop_password_link(request, f"members:{tenant.pk}"),
        "has_admin": _has_admin(tenant),
    }  # fmt: skip
    return render(request, "quotas/tenant_members.html", context)


def _member_of(request: HttpRequest, slug: str, pk: int) -> Membership:
    tenant = _visible_tenant(request, slug)
    membership = get_object_or_404(Membership.objects.select_related("user"), pk=pk, tenant=tenant)
    if not permissions.can_manage_members(request.user, tenant):
        raise PermissionDenied
    return membership


def _first_error(exc: ValidationError) -> str:
    return next(iter(m for msgs in exc.message_dict.values() for m in msgs), str(exc))


@require_POST
@login_required
def member_role(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    membership = _member_of(request, slug, pk)
    form = MemberRoleForm(request.POST, prefix=f"m{pk}")
    if not form.is_valid():
        messages.error(request, _("Choose one of the roles."))
    else:
        try:
            services.change_role(pk, request.user, role=form.cleaned_data["role"],
                                address=request_address(request))  # fmt: skip
        except ValidationError as exc:
            messages.error(request, _first_error(exc))
        except PermissionError:
            raise PermissionDenied from None
        else:
            messages.success(
                request, _("%(user)s's role saved.") % {"user": membership.user.get_username()}
            )
    return redirect("quotas:tenant_members", slug)


@require_POST
@login_required
def member_remove(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    membership = _member_of(request, slug, pk)
    try:
        services.remove_member(pk, request.user, address=request_address(request))
    except ValidationError as exc:
        messages.error(request, _first_error(exc))
    except PermissionError:
        raise PermissionDenied from None
    else:
        messages.success(request, _("%(user)s removed.") % {"user": membership.user.get_username()})
    return redirect("quotas:tenant_members", slug)


@login_required
def quota_add(request: HttpRequest, slug: str) -> HttpResponse:
    tenant = _visible_tenant(request, slug)
    _platform_admin_only(request)
    form = QuotaForm(request.POST or None, tenant=tenant)
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        quota = _run(form, services.create_quota, request.user, tenant=tenant,
                     address=request_address(request), **data)  # fmt: skip
        if quota is not None:
            messages.success(request, _("Quota in %(pool)s saved.") % {"pool": quota.pool.name})
            return redirect(tenant)
    context = {"form": form, "tenant": tenant, "quota": None}
    return render(request, "quotas/quota_form.html", context)


@login_required
def quota_edit(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    tenant = _visible_tenant(request, slug)
    _platform_admin_only(request)
    quota = get_object_or_404(Quota.objects.select_related("pool"), pk=pk, tenant=tenant)
    form = QuotaForm(request.POST or None, tenant=tenant, quota=quota)
    if request.method == "POST" and form.is_valid():
        saved = _run(form, services.update_quota, quota.pk, request.user,
                     address=request_address(request), **form.cleaned_data)  # fmt: skip
        if saved is not None:
            messages.success(request, _("Quota in %(pool)s saved.") % {"pool": quota.pool.name})
            return redirect(tenant)
    context = {"form": form, "tenant": tenant, "quota": quota}
    return render(request, "quotas/quota_form.html", context)


@require_POST
@login_required
def quota_delete(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    tenant = _visible_tenant(request, slug)
    _platform_admin_only(request)
    quota = get_object_or_404(Quota.objects.select_related("pool"), pk=pk, tenant=tenant)
    services.delete_quota(quota.pk, request.user, address=request_address(request))
    messages.success(request, _("Quota in %(pool)s removed.") % {"pool": quota.pool.name})
    return redirect(tenant)
