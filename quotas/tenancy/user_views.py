"""The Users pages (platform admins): list, make, deactivate and reactivate users, and a
new set-password link for one who has not chosen a password yet; the set-password page a
new user opens from that link.

A new link rides in the server-side session from the POST to the next view of the page
that shows it (post/redirect/get), which shows it once; those pages are never cached. The
rules are ``quotas.tenancy.accounts``.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse_lazy
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from audit.interface import request_address
from portal.forms import add_service_errors
from quotas import permissions
from quotas.models import Membership
from quotas.tenancy import accounts
from quotas.tenancy.forms import UserForm, UserSearchForm

PAGE_SIZE = 50
# The session key that carries a new set-password link to the one page that shows it.
LINK_SESSION_KEY = "quotas.password_link"


def keep_password_link(
    request: HttpRequest, where: str, user: AbstractBaseUser, path: str | None = None
) -> None:
    path = path or accounts.set_password_path(user)
    request.session[LINK_SESSION_KEY] = {
        "where": where, "username": user.get_username(), "link": request.build_absolute_uri(path),
    }  # fmt: skip


def pop_password_link(request: HttpRequest, where: str) -> dict | None:
    """The new link for this page, once (a link meant for another page is dropped too)."""
    if request.method != "GET":
        return None
    found = request.session.pop(LINK_SESSION_KEY, None) or {}
    if found.get("where") != where:
        return None
    return {**found, "days": max(settings.PASSWORD_RESET_TIMEOUT // 86400, 1)}


def _users_admin_only(request: HttpRequest) -> None:
    if not permissions.can_manage_users(request.user):
        raise PermissionDenied


def _first_error(exc: ValidationError) -> str:
    return next(iter(m for msgs in exc.message_dict.values() for m in msgs), str(exc))


@login_required
def user_list(request: HttpRequest) -> HttpResponse:
    _users_admin_only(request)
    form = UserSearchForm(request.GET)
    if not form.is_valid():
        context = {"form": form, "page": None, "query": ""}
        return render(request, "quotas/user_list.html", context, status=400)
    users = accounts.search_users(form.cleaned_data["q"], form.active())
    page = Paginator(users, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    return render(request, "quotas/user_list.html", context)


@login_required
def user_add(request: HttpRequest) -> HttpResponse:
    _users_admin_only(request)
    form = UserForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = accounts.create_user(
                request.user, address=request_address(request), **form.cleaned_data
            )
        except ValidationError as exc:
            add_service_errors(form, exc)
        except PermissionError:
            raise PermissionDenied from None
        else:
            messages.success(request, _("User %(user)s created.") % {"user": user.get_username()})
            keep_password_link(request, f"user:{user.pk}", user)
            return redirect("quotas:user_detail", user.pk)
    return render(request, "quotas/user_form.html", {"form": form})


def _managed_user(pk: int) -> AbstractBaseUser:
    # Users another app manages (service accounts) are not there for these pages.
    return get_object_or_404(accounts.managed_users(), pk=pk)


@login_required
@never_cache  # it may show a new set-password link, once
def user_detail(request: HttpRequest, pk: int) -> HttpResponse:
    _users_admin_only(request)
    person = _managed_user(pk)
    memberships = Membership.objects.of(person).select_related("tenant").order_by("tenant__name")
    source, owned = accounts.source_of(person)
    context = {
        "person": person,
        "source": source,
        "directory_owned": bool(owned),
        # An OpenID Connect provider owns the password but not whether active.
        "owns_password": "password" in owned,
        "owns_active": "is_active" in owned,
        "memberships": memberships,
        "is_self": person.pk == request.user.pk,
        "password_link": pop_password_link(request, f"user:{person.pk}"),
    }
    return render(request, "quotas/user_detail.html", context)


def _act(request: HttpRequest, pk: int, service, done: str) -> HttpResponse:
    _users_admin_only(request)
    person = _managed_user(pk)
    try:
        result = service(person.pk, request.user, address=request_address(request))
    except ValidationError as exc:
        messages.error(request, _first_error(exc))
        return redirect("quotas:user_detail", person.pk)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from None
    if service is accounts.new_password_link:
        keep_password_link(request, f"user:{person.pk}", person, result)
    messages.success(request, done % {"user": person.get_username()})
    return redirect("quotas:user_detail", person.pk)


@require_POST
@login_required
def user_deactivate(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, accounts.deactivate_user, _("%(user)s deactivated."))


@require_POST
@login_required
def user_reactivate(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, accounts.reactivate_user, _("%(user)s reactivated."))


@require_POST
@login_required
def user_password_link(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(request, pk, accounts.new_password_link, _("A new link for %(user)s."))


# --- the set-password page ---------------------------------------------------------------


class PasswordSetView(auth_views.PasswordResetConfirmView):
    """Django's own password-reset confirmation, for the link an admin passed on: refused
    (an invalid link) to a deactivated user and to users another app manages; the choice
    is recorded in the audit log with the password change."""

    template_name = "quotas/password_set.html"
    success_url = reverse_lazy("quotas:password_set_done")

    def get_user(self, uidb64: str):
        user = super().get_user(uidb64)
        return user if accounts.may_set_password(user) else None

    def form_valid(self, form):
        with transaction.atomic():
            response = super().form_valid(form)
            accounts.record_password_set(self.user, address=request_address(self.request))
        return response


class PasswordSetDoneView(auth_views.PasswordResetCompleteView):
    template_name = "quotas/password_set_done.html"
