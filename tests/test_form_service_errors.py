"""portal.forms.add_service_errors: a service's ValidationError on the form's fields."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from portal.forms import add_service_errors


class _Form(forms.Form):
    name = forms.CharField()
    days = forms.IntegerField()


def _checked(**data) -> _Form:
    form = _Form(data={"name": "a", "days": 3, **data})
    assert form.is_valid()
    return form


def test_each_error_lands_on_the_field_it_names_and_the_rest_on_the_form():
    form = _checked()
    add_service_errors(
        form,
        ValidationError({"name": ["Taken.", "Too short."], "owner": ["Gone."], "__all__": ["No."]}),
    )
    assert form.errors["name"] == ["Taken.", "Too short."]
    assert form.non_field_errors() == ["Gone.", "No."]
    assert "name" not in form.cleaned_data and form.cleaned_data["days"] == 3


def test_a_plain_dict_of_errors_is_taken_as_well():
    form = _checked()
    add_service_errors(form, {"days": ["At most 7."]})
    assert form.errors == {"days": ["At most 7."]}


def test_a_service_name_is_renamed_to_the_forms_field():
    form = _checked()
    add_service_errors(
        form, ValidationError({"expires_at": ["Too far."]}), fields={"expires_at": "days"}
    )
    assert form.errors == {"days": ["Too far."]}


def test_rest_takes_the_errors_that_name_no_field_of_the_form():
    form = _checked()
    add_service_errors(form, ValidationError({"gpus": ["Taken."], "name": ["Bad."]}), rest="days")
    assert form.errors == {"days": ["Taken."], "name": ["Bad."]}


def test_an_error_raised_without_a_dict_is_the_forms_as_a_whole():
    # Such an error has no message_dict (an AttributeError): it names no field.
    form = _checked()
    add_service_errors(form, ValidationError(["One.", "Two."]))
    assert form.non_field_errors() == ["One.", "Two."]
    assert not form.has_error("name") and not form.has_error("days")
