"""Forms for tenants, members and quotas. They only carry input; ``quotas.tenancy``
holds the rules and its field-level errors land on the fields here."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from quotas.choices import Role
from quotas.models import Quota, Tenant
from quotas.tenancy import QUOTA_FIELDS, TENANT_FIELDS


class ServiceErrorsMixin:
    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        for key, messages in errors.items():
            for message in messages:
                self.add_error(key if key in self.fields else None, message)


class TenantForm(ServiceErrorsMixin, forms.Form):
    def __init__(self, *args, tenant: Tenant | None = None, **kwargs) -> None:
        if tenant is not None:
            kwargs.setdefault("initial", {k: getattr(tenant, k) for k in TENANT_FIELDS})
        super().__init__(*args, **kwargs)
        self.fields.update(forms.fields_for_model(Tenant, fields=TENANT_FIELDS))
        self.fields["description"].max_length = 2000
        self.fields["description"].widget.attrs.update({"rows": 3, "maxlength": 2000})


class QuotaForm(ServiceErrorsMixin, forms.Form):
    """The guarantees, limits and approval policy of a tenant in a pool; the pool is
    chosen when the quota is created and stays."""

    def __init__(self, *args, quota: Quota | None = None, tenant: Tenant, **kwargs) -> None:
        if quota is not None:
            kwargs.setdefault("initial", {k: getattr(quota, k) for k in QUOTA_FIELDS})
        super().__init__(*args, **kwargs)
        if quota is None:
            self.fields["pool"] = forms.ModelChoiceField(
                label=_("Pool"),
                queryset=Pool.objects.exclude(quotas__tenant=tenant).order_by("name"),
                help_text=_("The pool this quota opens to the tenant."),
            )
        self.fields.update(forms.fields_for_model(Quota, fields=QUOTA_FIELDS))
        for name in QUOTA_FIELDS:
            field = self.fields[name]
            if isinstance(field, forms.IntegerField):
                field.min_value = 0
                field.widget.attrs["min"] = 0


class MemberAddForm(ServiceErrorsMixin, forms.Form):
    username = forms.CharField(label=_("User name"), max_length=150)
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices, initial=Role.MEMBER)


class MemberRoleForm(ServiceErrorsMixin, forms.Form):
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices)
