"""The token pages: your own tokens on the Account page (with your language and time zone,
kept by ``quotas.interface.set_preferences``); a tenant's service accounts and
their tokens, for its admins.

A new key rides in the server-side session from the POST to the next page view, which
shows it once (post/redirect/get); a reload shows only its hint. A tenant the user may not
see is 404; one they see but may not manage is 403 (``tokens.services.can_manage``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import translation
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from audit.interface import request_address
from portal.forms import add_service_errors
from quotas import permissions as quota_permissions
from quotas.interface import preferences_of, set_preferences
from quotas.models import Tenant
from tokens import services
from tokens.forms import SERVICE_FIELDS, PreferenceForm, ServiceAccountForm, TokenForm
from tokens.models import ApiToken, ServiceAccount

# The session key that carries a new key from the POST to the one page that shows it.
NEW_KEY_SESSION_KEY = "tokens.new_key"


def _run(form: Any, service: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a service; its field errors land on the form (None is returned then)."""
    try:
        return service(*args, **kwargs)
    except ValidationError as exc:
        add_service_errors(form, exc, fields=SERVICE_FIELDS)
    except PermissionError:
        raise PermissionDenied from None
    return None


def _keep_new_key(request: HttpRequest, where: str, key: str) -> None:
    request.session[NEW_KEY_SESSION_KEY] = {"where": where, "key": key}


def _pop_new_key(request: HttpRequest, where: str) -> str:
    """The new key for this page, once; a key meant for another page is dropped too."""
    found = request.session.pop(NEW_KEY_SESSION_KEY, None) or {}
    return found.get("key", "") if found.get("where") == where else ""


def _issue_from(request: HttpRequest, form: TokenForm, service: Any, *args: Any) -> Any:
    data = form.cleaned_data
    return _run(form, service, request.user, *args, name=data["name"], scope=data["scope"],
                expires_at=services.expiry_in_days(data["expires_in_days"]),
                address=request_address(request))  # fmt: skip


# --- the Account page ----------------------------------------------------------------


def _preference_form(request: HttpRequest, data: Any = None) -> PreferenceForm:
    found = preferences_of(request.user)
    return PreferenceForm(data, initial={"language": found.language, "time_zone": found.time_zone})


def _account_page(
    request: HttpRequest, form: TokenForm, preference_form: PreferenceForm, status: int = 200
) -> HttpResponse:
    context = {
        "form": form,
        "preference_form": preference_form,
        "new_key": _pop_new_key(request, "account") if request.method == "GET" else "",
        "tokens": services.own_tokens(request.user).select_related("user").order_by("-created"),
    }
    return render(request, "tokens/account.html", context, status=status)


@login_required
@never_cache  # the page may hold a new key: no cache, proxy or back button keeps it
def account(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        issued = _issue_from(request, form, services.create_token)
        if issued is not None:
            _keep_new_key(request, "account", issued[1])
            return redirect("tokens:account")
    return _account_page(request, form, _preference_form(request))


@require_POST
@login_required
@never_cache
def account_preferences(request: HttpRequest) -> HttpResponse:
    """The language and time zone form of the Account page: saved, or the page again with
    the form's errors (400) and nothing changed."""
    form = _preference_form(request, request.POST)
    if form.is_valid():
        saved = _run(form, set_preferences, request.user, **form.cleaned_data)
        if saved is not None:
            # Said in the language just chosen (the browser's, for "browser default").
            language = saved.language or translation.get_language_from_request(request)
            with translation.override(language):
                messages.success(request, _("Your language and time zone are saved."))
            response = redirect("tokens:account")
            if not saved.language:
                # The switch's cookie would otherwise keep the last language it chose.
                response.delete_cookie(settings.LANGUAGE_COOKIE_NAME)
            return response
    return _account_page(request, TokenForm(), form, status=400)


@require_POST
@login_required
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    try:
        revoked = services.revoke_own_token(request.user, token, address=request_address(request))
    except PermissionError:
        raise PermissionDenied from None
    if revoked:
        text = _("Token %(name)s revoked. Nothing can use it any more.")
        messages.success(request, text % {"name": token.name})
    return redirect("tokens:account")


# --- a tenant's service accounts -------------------------------------------------------


def _visible_tenant(request: HttpRequest, slug: str) -> Tenant:
    tenant = get_object_or_404(Tenant, slug=slug)
    if not quota_permissions.can_view_tenant(request.user, tenant):
        raise Http404
    return tenant


def _managed_account(request: HttpRequest, slug: str, pk: int) -> ServiceAccount:
    tenant = _visible_tenant(request, slug)
    account = get_object_or_404(ServiceAccount.objects.select_related("user"), pk=pk, tenant=tenant)
    if not services.can_manage(request.user, tenant):
        raise PermissionDenied
    return account


@login_required
def service_account_list(request: HttpRequest, slug: str) -> HttpResponse:
    """Every member of the tenant sees its service accounts; its admins manage them."""
    tenant = _visible_tenant(request, slug)
    may_manage = services.can_manage(request.user, tenant)
    form = ServiceAccountForm(request.POST or None)
    if request.method == "POST":
        if not may_manage:
            raise PermissionDenied
        if form.is_valid():
            account = _run(form, services.create_service_account, request.user, tenant=tenant,
                           address=request_address(request), **form.cleaned_data)  # fmt: skip
            if account is not None:
                messages.success(
                    request, _("Service account %(name)s created.") % {"name": account.name}
                )
                return redirect("tokens:service_account_detail", tenant.slug, account.pk)
    context = {
        "tenant": tenant,
        "accounts": tenant.service_accounts.select_related("user", "created_by"),
        "form": form,
        "may_manage": may_manage,
    }
    return render(request, "tokens/service_account_list.html", context)


@login_required
@never_cache
def service_account_detail(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    account = _managed_account(request, slug, pk)
    form = TokenForm(request.POST or None)
    where = f"service-account-{account.pk}"
    if request.method == "POST" and form.is_valid():
        issued = _issue_from(request, form, services.issue_service_token, account)
        if issued is not None:
            _keep_new_key(request, where, issued[1])
            return redirect("tokens:service_account_detail", slug, account.pk)
    context = {
        "tenant": account.tenant,
        "account": account,
        "form": form,
        "new_key": _pop_new_key(request, where) if request.method == "GET" else "",
        "tokens": ApiToken.objects.filter(user=account.user)
        .select_related("user")
        .order_by("-created"),
    }
    return render(request, "tokens/service_account_detail.html", context)


@require_POST
@login_required
def service_token_revoke(request: HttpRequest, slug: str, pk: int, token_pk: int) -> HttpResponse:
    account = _managed_account(request, slug, pk)
    token = get_object_or_404(ApiToken, pk=token_pk, user=account.user)
    if services.revoke_service_token(
        request.user, account, token, address=request_address(request)
    ):
        messages.success(request, _("Token %(name)s revoked.") % {"name": token.name})
    return redirect("tokens:service_account_detail", slug, account.pk)


@require_POST
@login_required
def service_account_disable(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    account = _managed_account(request, slug, pk)
    if services.disable_service_account(request.user, account, address=request_address(request)):
        text = _("Service account %(name)s disabled; its tokens were revoked.")
        messages.success(request, text % {"name": account.name})
    return redirect("tokens:service_account_list", slug)
