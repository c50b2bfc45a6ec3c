"""Rule and subscription pages, with the API's permissions (alerts.permissions).

Everyone signed in reads the rules that apply to them; the platform admin creates,
changes, disables and deletes them (others: 403). Subscriptions: one's own, and one's
tenants' as their admin; another's is 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from alerts import config
from alerts.config_forms import RuleForm, SubscriptionForm
from alerts.models import Rule, Subscription
from alerts.permissions import (
    managed_tenants,
    manages_rules,
    scope_targets,
    visible_channels,
    visible_rules,
    visible_subscriptions,
)
from audit.interface import request_address
from portal.forms import add_service_errors


def _rule_for_admin(request: HttpRequest, pk: int) -> Rule:
    rule = get_object_or_404(visible_rules(request.user), pk=pk)
    if not manages_rules(request.user):
        raise PermissionDenied(_("Only a platform admin changes alert rules."))
    return rule


@login_required
def rule_list(request: HttpRequest) -> HttpResponse:
    rules = visible_rules(request.user).select_related("pool", "node", "tenant")
    return render(request, "alerts/rules/list.html",
                  {"rules": rules, "can_edit": manages_rules(request.user)})  # fmt: skip


@login_required
def rule_add(request: HttpRequest) -> HttpResponse:
    if not manages_rules(request.user):
        raise PermissionDenied(_("Only a platform admin changes alert rules."))
    return _rule_form(request, None)


@login_required
def rule_edit(request: HttpRequest, pk: int) -> HttpResponse:
    return _rule_form(request, _rule_for_admin(request, pk))


def _rule_form(request: HttpRequest, rule: Rule | None) -> HttpResponse:
    form = RuleForm(request.POST or None, rule=rule, targets=scope_targets(request.user))
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                config.save_rule(rule.pk if rule else None, form.values(), actor=request.user,
                                 address=request_address(request))  # fmt: skip
            except ValidationError as exc:
                add_service_errors(form, exc, fields=form.service_fields())
            else:
                messages.success(request, _("Rule %(name)s saved.") % {
                    "name": form.cleaned_data["name"]})  # fmt: skip
                return redirect("alerts:rule_list")
        status = 400
    return render(request, "alerts/rules/form.html", {"form": form, "rule": rule}, status=status)


@login_required
@require_POST
def rule_toggle(request: HttpRequest, pk: int) -> HttpResponse:
    rule = _rule_for_admin(request, pk)
    # The service takes the scope's target with every change (as the API's serializer).
    values = {"enabled": not rule.enabled,
              "scope_id": rule.pool_id or rule.node_id or rule.tenant_id}  # fmt: skip
    config.save_rule(rule.pk, values, actor=request.user, address=request_address(request))
    text = _("Rule %(name)s enabled.") if not rule.enabled else _("Rule %(name)s disabled.")
    messages.success(request, text % {"name": rule.label})
    return redirect("alerts:rule_list")


@login_required
@require_POST
def rule_delete(request: HttpRequest, pk: int) -> HttpResponse:
    rule = _rule_for_admin(request, pk)
    try:
        config.delete_rule(rule.pk, actor=request.user, address=request_address(request))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("alerts:rule_list")
    messages.success(request, _("Rule %(name)s deleted.") % {"name": rule.label})
    return redirect("alerts:rule_list")


@login_required
def subscription_list(request: HttpRequest) -> HttpResponse:
    subs = (visible_subscriptions(request.user)
            .select_related("owner", "tenant", "channel").prefetch_related("rules"))  # fmt: skip
    return render(request, "alerts/subscriptions/list.html", {"subscriptions": subs})


def _subscription_form(request: HttpRequest, sub: Subscription | None) -> SubscriptionForm:
    user = request.user
    if sub is None:
        # The owner is chosen on the form: the user's own channels and those of the
        # tenants they administer are offered; the service checks the pair.
        channels = visible_channels(user).filter(
            Q(owner=user) | Q(tenant__in=managed_tenants(user).values("pk"))
        )
    else:
        channels = visible_channels(user).filter(owner_id=sub.owner_id, tenant_id=sub.tenant_id)
    return SubscriptionForm(
        request.POST or None, subscription=sub, tenants=managed_tenants(user),
        channels=channels.order_by("name", "pk"), rules=visible_rules(user).order_by("name"),
        targets=scope_targets(user),
    )  # fmt: skip


@login_required
def subscription_add(request: HttpRequest) -> HttpResponse:
    form = _subscription_form(request, None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            tenant = form.cleaned_data.get("tenant")
            try:
                config.save_subscription(
                    None, form.values(), actor=request.user, address=request_address(request),
                    owner_id=None if tenant else request.user.pk,
                    tenant_id=tenant.pk if tenant else None,
                )  # fmt: skip
            except ValidationError as exc:
                add_service_errors(form, exc, fields=form.service_fields())
            else:
                messages.success(request, _("Subscription saved."))
                return redirect("alerts:subscription_list")
        status = 400
    return render(request, "alerts/subscriptions/form.html",
                  {"form": form, "subscription": None}, status=status)  # fmt: skip


@login_required
def subscription_edit(request: HttpRequest, pk: int) -> HttpResponse:
    sub = get_object_or_404(visible_subscriptions(request.user), pk=pk)
    form = _subscription_form(request, sub)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                config.save_subscription(sub.pk, form.values(), actor=request.user,
                                         address=request_address(request))  # fmt: skip
            except ValidationError as exc:
                add_service_errors(form, exc, fields=form.service_fields())
            else:
                messages.success(request, _("Subscription saved."))
                return redirect("alerts:subscription_list")
        status = 400
    return render(request, "alerts/subscriptions/form.html",
                  {"form": form, "subscription": sub}, status=status)  # fmt: skip


@login_required
@require_POST
def subscription_delete(request: HttpRequest, pk: int) -> HttpResponse:
    sub = get_object_or_404(visible_subscriptions(request.user), pk=pk)
    config.delete_subscription(sub.pk, actor=request.user, address=request_address(request))
    messages.success(request, _("Subscription deleted."))
    return redirect("alerts:subscription_list")
