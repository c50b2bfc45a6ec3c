from django.db import connection
from django.http import (
    HttpRequest,
    HttpResponsePermanentRedirect,
    JsonResponse,
)
from django.templatetags.static import static


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: the process answers and the DB does too."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Browsers and tools ask /favicon.ico before reading any page: send them to the icon."""
    return HttpResponsePermanentRedirect(static("portal/favicon.svg"))
