"""The error answers in the OpenAPI schema: one ``Error`` component (portal/api_errors.py)
and the errors every operation may answer with, added after the schema is built
(SPECTACULAR_SETTINGS' POSTPROCESSING_HOOKS), so no view has to declare them."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import OpenApiResponse

from portal import api_errors, idempotency

COMPONENT = "Error"
REF = {"$ref": f"#/components/schemas/{COMPONENT}"}

FIELDS_EXAMPLE = {"memory_mib": ["Ensure this value is greater than or equal to 1."]}

SCHEMA = {
    "type": "object",
    "description": "Every error answer of the API.",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "enum": list(api_errors.CODES),
                    "description": "For programs. "
                    + " ".join(f"{code}: {text}" for code, text in api_errors.CODES.items()),
                },
                "message": {"type": "string", "description": "For people, in their language."},
                "fields": {
                    "type": "object",
                    "description": (
                        "Only when code is invalid: the messages for each field at fault "
                        "(non_field_errors for the input as a whole); a nested field has "
                        "the same shape one level down."
                    ),
                    "additionalProperties": {"oneOf": [{"type": "array"}, {"type": "object"}]},
                    # Else a reader's sample shows made-up keys (property1, property2).
                    "example": FIELDS_EXAMPLE,
                },
            },
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}

# For views that declare an error answer themselves (extend_schema responses={409: ERROR}).
ERROR = OpenApiResponse(
    response={"type": "object", "properties": SCHEMA["properties"]},
    description="Error",
)

# What each status means, and an example of its body.
ANSWERS: dict[str, tuple[str, str, str, dict | None]] = {
    "400": ("Invalid input; nothing changed.", "invalid", "Invalid input.",
            FIELDS_EXAMPLE),
    "401": ("No credentials, or invalid ones (with WWW-Authenticate).", "not_authenticated",
            "Authentication credentials were not provided.", None),
    "403": ("The caller may not do this.", "permission_denied",
            "You do not have permission to perform this action.", None),
    "404": ("Not found, or not visible to the caller.", "not_found", "Not found.", None),
    "429": ("Too many requests; Retry-After says when to try again.", "throttled",
            "Request was throttled. Expected available in 30 seconds.", None),
}  # fmt: skip
IDEMPOTENT_ANSWERS: dict[str, tuple[str, str, str, dict | None]] = {
    "409": ("A request with this Idempotency-Key is still running.", "idempotency_in_progress",
            str(idempotency.IdempotencyInProgress.default_detail), None),
    "422": ("This Idempotency-Key was used with a different request.",
            "idempotency_key_reused", str(idempotency.IdempotencyKeyReused.default_detail), None),
}  # fmt: skip
IDEMPOTENCY_HEADER = {
    "in": "header",
    "name": idempotency.HEADER,
    "schema": {"type": "string", "minLength": 1, "maxLength": idempotency.MAX_KEY_LENGTH},
    "description": (
        "Any unique string (a UUID) of at most 255 characters. A retry with the same key and "
        "body creates nothing again and gets the first answer, with Idempotent-Replayed: "
        "true; a concurrent retry waits for the first request. Kept 24 hours."
    ),
}


def _answer(description: str, code: str, message: str, fields: dict | None) -> dict:
    return {
        "description": description,
        "content": {
            "application/json": {
                "schema": REF,
                "example": api_errors.error_body(code, message, fields),
            }
        },
    }


def _route(path: str) -> str:
    """A path with its parameters unnamed: the generator's endpoints say ``{pk}`` where the
    schema's paths say ``{id}``."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def _idempotent_posts(generator: Any) -> set[str]:
    """The routes (``_route``) whose POST honours an Idempotency-Key."""
    routes = set()
    for path, _regex, method, view in generator.endpoints or []:
        cls = getattr(view, "cls", None)
        action = (getattr(view, "actions", None) or {}).get("post")
        if method == "POST" and cls and idempotency.honours_key(cls, action):
            routes.add(_route(path))
    return routes


def document_errors(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """Add the Error component and the error answers to every operation of the schema."""
    result.setdefault("components", {}).setdefault("schemas", {})[COMPONENT] = SCHEMA
    idempotent = _idempotent_posts(generator)
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            answers = dict(ANSWERS)
            if method == "post" and _route(path) in idempotent:
                answers.update(IDEMPOTENT_ANSWERS)
                operation.setdefault("parameters", []).append(IDEMPOTENCY_HEADER)
            for status_code, answer in answers.items():
                responses.setdefault(status_code, _answer(*answer))
            for status_code, response in responses.items():
                # An error answer a view declared itself (409 and the like) is an Error too.
                if status_code >= "400" and "content" not in response:
                    response["content"] = {"application/json": {"schema": REF}}
                elif status_code >= "400":
                    for media in response["content"].values():
                        media["schema"] = REF
    return result
