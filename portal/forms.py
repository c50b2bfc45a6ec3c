"""What every app's forms share: a service's ValidationError shown on the form.

The services hold the rules and raise ``django.core.exceptions.ValidationError`` keyed by
the names they know; the pages show each message beside the field it is about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError


def add_service_errors(
    form: forms.BaseForm,
    errors: ValidationError | Mapping[str, Iterable[str]],
    *,
    fields: Mapping[str, str] | None = None,
    rest: str | None = None,
) -> None:
    """Each of a service's errors on the form field it names.

    ``errors``: the service's ValidationError, or its errors as a dict (name: messages).
    ``fields``: the service's name for a field, where the form calls it otherwise.
    ``rest``: the field that takes the errors naming none of the form's; by default they
    are the form's as a whole, as is a ValidationError that names no field at all.
    """
    if isinstance(errors, ValidationError):
        # message_dict exists only on an error raised with a dict; a bare one names no field.
        bare = not hasattr(errors, "error_dict")
        errors = {NON_FIELD_ERRORS: errors.messages} if bare else errors.message_dict
    renamed = fields or {}
    for key, messages in errors.items():
        name = renamed.get(key, key)
        # add_error refuses a name that is not a field of the form (a ValueError).
        target = name if name in form.fields else rest
        for message in messages:
            form.add_error(target, message)
