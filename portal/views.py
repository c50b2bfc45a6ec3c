import hashlib
from functools import cache
from pathlib import Path

from django.contrib.staticfiles import finders
from django.db import connection
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotModified,
    HttpResponsePermanentRedirect,
    JsonResponse,
)
from django.templatetags.static import static
from django.views.decorators.http import require_safe


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: the process answers and the DB does too."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """Browsers and tools ask /favicon.ico before reading any page: send them to the icon."""
    return HttpResponsePermanentRedirect(static("portal/favicon.svg"))


REDOC_BUNDLE = "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js"
# ReDoc draws Redocly's logo beside "API docs by Redocly" from Redocly's CDN: the page's
# policy refuses it (a console error) and an offline network cannot reach it anyway.
REDOC_CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@cache
def _redoc_bundle() -> tuple[bytes, str]:
    path = finders.find(REDOC_BUNDLE)
    if path is None:
        raise FileNotFoundError(REDOC_BUNDLE)
    text = Path(path).read_text(encoding="utf-8")
    if REDOC_CDN_LOGO not in text:
        # A new ReDoc moved its logo: say so here rather than let the docs break quietly.
        raise ValueError(f"{REDOC_BUNDLE} no longer names {REDOC_CDN_LOGO}")
    text = text.replace(REDOC_CDN_LOGO, static("portal/redoc-logo.svg"))
    # The source map sits beside the original, not beside this URL.
    text = text.replace(
        "sourceMappingURL=redoc.standalone.js.map", f"sourceMappingURL={static(REDOC_BUNDLE)}.map"
    )
    body = text.encode()
    return body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


@require_safe
def redoc_bundle(request: HttpRequest) -> HttpResponse:
    """ReDoc's script as the sidecar package ships it, with the logo from the portal."""
    body, etag = _redoc_bundle()
    if request.headers.get("If-None-Match") == etag:
        return HttpResponseNotModified(headers={"ETag": etag})
    response = HttpResponse(body, content_type="text/javascript; charset=utf-8")
    response["ETag"] = etag
    response["Cache-Control"] = "public, max-age=86400"
    return response
