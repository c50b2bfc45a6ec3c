"""The API's one error shape (docs/api.md, "Errors").

Every error under ``/api/`` is answered as::

    {"error": {"code": "not_found", "message": "Not found.", "fields": {"name": ["..."]}}}

``code`` is for programs (a fixed list, ``CODES``), ``message`` for people (in the caller's
language), ``fields`` only for invalid input (``non_field_errors`` for the input as a whole).
DRF's exceptions reach ``exception_handler`` (REST_FRAMEWORK's EXCEPTION_HANDLER), and so
does the ``django.core.exceptions.ValidationError`` a service raises from a view or a
serializer's save: a 400 with its ``fields``, so no view converts it itself. What never
reaches a DRF view (an unknown path, a crash) gets the same body from ``not_found``,
``server_error`` and their kin (the URLconf's handler400, 403, 404 and 500) for paths under
``/api/``; elsewhere they answer the portal's own pages (templates/404.html and kin).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.utils.translation import gettext_lazy as _
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

API_PREFIX = "/api/"

# Every code the API answers with, and what it means (the schema's Error component lists them).
CODES = {
    "invalid": "The input is invalid; `fields` says where.",
    "parse_error": "The body could not be parsed.",
    "not_authenticated": "No credentials were given.",
    "authentication_failed": "The credentials are invalid, expired or revoked.",
    "permission_denied": "The caller may not do this.",
    "not_found": "Nothing here, or nothing the caller may see.",
    "method_not_allowed": "The path does not take this method.",
    "not_acceptable": "No answer in the media type asked for.",
    "unsupported_media_type": "The body's media type is not accepted.",
    "conflict": "The object is not in a state that allows this.",
    "throttled": "Too many requests; `Retry-After` says when to try again.",
    "idempotency_key_reused": "The Idempotency-Key was used with another request.",
    "idempotency_in_progress": "The first request with this Idempotency-Key is still running.",
    "server_error": "The server failed; nothing is promised about what changed.",
    "cluster_unavailable": "The Kubernetes cluster did not answer; `Retry-After` says when to "
    "try again.",
    "cluster_refused": "The Kubernetes cluster refused the portal's write (its answer says why).",
}


class Conflict(exceptions.APIException):
    """409: the object is not in a state that allows this (already done, still in use)."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = _("The object is not in a state that allows this.")
    default_code = "conflict"


def error_body(code: str, message: Any, fields: dict | None = None) -> dict:
    error: dict[str, Any] = {"code": code, "message": str(message)}
    if fields is not None:
        error["fields"] = fields
    return {"error": error}


def error_response(
    code: str,
    message: Any,
    status_code: int,
    *,
    fields: dict | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """An error built by a view itself, in the shape the handler gives raised ones."""
    return Response(error_body(code, message, fields), status=status_code, headers=headers)


def field_errors(detail: Any) -> dict:
    """A ValidationError's detail as ``fields``: a bare list belongs to the whole input."""
    if isinstance(detail, dict):
        # Django's model validation names the whole object "__all__"; DRF's name is the API's.
        # A message given bare ({"range": "..."}) is listed like every other field's.
        return {"non_field_errors" if name == NON_FIELD_ERRORS else name:
                errors if isinstance(errors, list | dict) else [errors]
                for name, errors in detail.items()}  # fmt: skip
    return {"non_field_errors": detail if isinstance(detail, list) else [detail]}


def as_api_error(exc: DjangoValidationError) -> exceptions.ValidationError:
    """A service's ValidationError as DRF's: its field errors by name, or, raised without a
    dict, its messages about the input as a whole (the first one the answer's message)."""
    if hasattr(exc, "error_dict"):
        return exceptions.ValidationError(exc.message_dict)
    return exceptions.ValidationError(exc.messages)


def _code(exc: exceptions.APIException) -> str:
    if isinstance(exc, exceptions.ValidationError):
        return "invalid"
    codes = exc.get_codes()
    return codes if isinstance(codes, str) and codes in CODES else exc.default_code


def _message(exc: exceptions.APIException) -> str:
    detail = exc.detail
    if isinstance(exc, exceptions.ValidationError):
        # One complaint about the whole input says it best; several fields get the summary.
        if isinstance(detail, list) and len(detail) == 1 and isinstance(detail[0], str):
            return str(detail[0])
        return str(exceptions.ValidationError.default_detail)
    if isinstance(detail, list | dict):
        return str(exc.default_detail)
    return str(detail)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    # Django's own 404 carries an internal text ("No GpuRequest matches..."): the caller
    # gets the translated "Not found." instead.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args)
    elif isinstance(exc, DjangoValidationError):
        exc = as_api_error(exc)
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response  # not an API error: Django answers 500 (server_error below)
    fields = field_errors(exc.detail) if isinstance(exc, exceptions.ValidationError) else None
    response.data = error_body(_code(exc), _message(exc), fields)
    return response


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def _page(request: HttpRequest | None, status_code: int) -> HttpResponse:
    """The portal's own error page (templates/<status>.html): the way back, in the
    reader's language. The 500 page gets no request: whatever failed may fail again."""
    template = loader.get_template(f"{status_code}.html")
    return HttpResponse(template.render({"code": status_code}, request), status=status_code)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: JSON under /api/, the portal's page elsewhere."""
    if _is_api(request):
        body = error_body("invalid", _("The request could not be read."))
        return JsonResponse(body, status=status.HTTP_400_BAD_REQUEST)
    return _page(request, 400)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler403: JSON under /api/, the portal's page elsewhere."""
    if _is_api(request):
        body = error_body("permission_denied", exceptions.PermissionDenied.default_detail)
        return JsonResponse(body, status=status.HTTP_403_FORBIDDEN)
    return _page(request, 403)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: JSON under /api/, the portal's page elsewhere."""
    if _is_api(request):
        body = error_body("not_found", exceptions.NotFound.default_detail)
        return JsonResponse(body, status=status.HTTP_404_NOT_FOUND)
    return _page(request, 404)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: JSON under /api/, the portal's page elsewhere."""
    if _is_api(request):
        body = error_body("server_error", _("A server error occurred."))
        return JsonResponse(body, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    return _page(None, 500)
