"""What every app's forms share: a service's ValidationError shown on the form, and a
memory size typed in GiB.

The services hold the rules and raise ``django.core.exceptions.ValidationError`` keyed by
the names they know; the pages show each message beside the field it is about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.utils.translation import gettext_lazy as _


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


MIB_PER_GIB = 1024


def mib_as_gib(mib: int) -> str:
    """Whole MiB as the GiB a person types: 81920 -> "80", 7680 -> "7.5" (exact: a MiB is
    1/1024 GiB, at most ten decimals)."""
    text = format(Decimal(mib) / MIB_PER_GIB, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


class GiBField(forms.DecimalField):
    """A memory size typed in GiB, decimals allowed (7.5), cleaned to whole MiB (7680).

    People read GiB on every page; the models and the API count MiB. A size that is no
    whole number of MiB (0.001 GiB) is refused rather than rounded behind the typist's
    back. ``min_mib``/``max_mib`` bound the MiB it cleans to.
    """

    default_error_messages = {
        "whole_mib": _("Give a size that is a whole number of MiB (1 GiB = 1024 MiB), "
                       "e.g. 7.5 GiB."),
        "negative": _("Give 0 GiB or more."),
        "not_positive": _("Give a size above 0 GiB."),
        "too_small": _("Give at least %(gib)s GiB (%(mib)s MiB)."),
        "too_large": _("Give at most %(gib)s GiB (%(mib)s MiB)."),
    }  # fmt: skip

    def __init__(self, *, min_mib: int = 0, max_mib: int = 2**63 - 1, **kwargs) -> None:
        self.min_mib, self.max_mib = min_mib, max_mib
        # Ten decimals hold any whole MiB (1 MiB = 0.0009765625 GiB); twenty digits keep
        # the product with 1024 exact in Decimal's default 28-digit context.
        kwargs.setdefault("help_text", _("In GiB, decimals allowed (7.5 GiB = 7680 MiB)."))
        super().__init__(max_digits=20, decimal_places=10, **kwargs)
        self.widget.attrs.update({"step": "any", "min": mib_as_gib(min_mib), "data-gib-input": ""})

    def prepare_value(self, value):
        # Initial values are the model's MiB; what the person typed stays as typed.
        if isinstance(value, int) and not isinstance(value, bool):
            return mib_as_gib(value)
        return value

    def has_changed(self, initial, data) -> bool:
        try:
            return self.clean(data) != initial
        except ValidationError:
            return True

    def _refuse(self, code: str, bound: int) -> None:
        params = {"gib": mib_as_gib(bound), "mib": bound}
        raise ValidationError(self.error_messages[code], code=code, params=params)

    def clean(self, value) -> int | None:
        gib = super().clean(value)
        if gib is None:
            return None
        mib = gib * MIB_PER_GIB
        if mib != mib.to_integral_value():
            raise ValidationError(self.error_messages["whole_mib"], code="whole_mib")
        mib = int(mib)
        if mib < self.min_mib:
            if self.min_mib <= 1:  # "at least 0.0009765625 GiB" would help nobody
                code = "not_positive" if self.min_mib else "negative"
                raise ValidationError(self.error_messages[code], code="min_value")
            self._refuse("too_small", self.min_mib)
        if mib > self.max_mib:
            self._refuse("too_large", self.max_mib)
        return mib
