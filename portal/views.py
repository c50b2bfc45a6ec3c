from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import redirect, render
from django.templatetags.static import static
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from portal import api_tokens

# The session key that carries a new API token from the POST to the one page that shows it.
NEW_TOKEN_SESSION_KEY = "portal.new_api_token"  # noqa: S105 (a session key name, not a secret)


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: the process answers and the DB does too."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Browsers and tools ask /favicon.ico before reading any page: send them to the icon."""
    return HttpResponsePermanentRedirect(static("portal/favicon.svg"))


@require_GET
@login_required
@never_cache  # the page may hold a new token: no cache, proxy or back button keeps it
def account(request: HttpRequest) -> HttpResponse:
    info = api_tokens.token_info(request.user)
    context = {
        "new_key": request.session.pop(NEW_TOKEN_SESSION_KEY, ""),
        "hint": info.hint if info else "",
        "created": info.created if info else None,
    }
    return render(request, "portal/account.html", context)


@require_POST
@login_required
def account_token_create(request: HttpRequest) -> HttpResponseRedirect:
    # Post/redirect/get: the key rides in the server-side session to the next page view,
    # which shows it once; a reload shows only the hint.
    request.session[NEW_TOKEN_SESSION_KEY] = api_tokens.issue_token(request.user)
    return redirect("account")


@require_POST
@login_required
def account_token_revoke(request: HttpRequest) -> HttpResponseRedirect:
    request.session.pop(NEW_TOKEN_SESSION_KEY, None)
    if api_tokens.revoke_token(request.user):
        messages.success(request, _("Your API token was revoked. Nothing can use it any more."))
    return redirect("account")
