"""Forms for tenants, members and quotas. They only carry input; ``quotas.tenancy.services``
holds the rules and its field-level errors land on the fields here."""

from __future__ import annotations

from django import forms
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from pools.models import Pool
from portal.forms import GiBField
from quotas.choices import Role
from quotas.models import Quota, Tenant
from quotas.tenancy.accounts import NewUser
from quotas.tenancy.services import QUOTA_FIELDS, TENANT_FIELDS


class TenantForm(forms.Form):
    def __init__(self, *args, tenant: Tenant | None = None, **kwargs) -> None:
        if tenant is not None:
            kwargs.setdefault("initial", {k: getattr(tenant, k) for k in TENANT_FIELDS})
        super().__init__(*args, **kwargs)
        self.fields.update(forms.fields_for_model(Tenant, fields=TENANT_FIELDS))
        self.fields["description"].max_length = 2000
        self.fields["description"].widget.attrs.update({"rows": 3, "maxlength": 2000})
        # The slug follows the name as it is typed (static/portal/base.js).
        self.fields["slug"].widget.attrs["data-slug-from"] = "name"


class QuotaForm(forms.Form):
    """The guarantees, limits and approval policy of a tenant in a pool; the pool is
    chosen when the quota is created and stays. Memory is typed in GiB (the model keeps
    MiB); ``fieldsets`` groups the seventeen fields for the page."""

    # The memory fields' labels in the unit they are typed in.
    GIB_LABELS = {
        "guaranteed_memory_mib": _("Guaranteed memory (GiB)"),
        "limit_memory_mib": _("Memory limit (GiB)"),
        "user_limit_memory_mib": _("Memory per member (GiB)"),
    }
    FIELDSETS = (
        (_("Size"), ("guaranteed_vgpus", "limit_vgpus", "guaranteed_compute_pct",
                     "limit_compute_pct", "guaranteed_memory_mib", "limit_memory_mib")),
        (_("GPU-hours"), ("guaranteed_gpu_hours", "limit_gpu_hours", "budget_period")),
        (_("Per member"), ("user_limit_vgpus", "user_limit_compute_pct",
                           "user_limit_memory_mib")),
        (_("Approval"), ("auto_approve_vgpus", "auto_approve_compute_pct",
                         "auto_approve_hours", "escalate_after_hours",
                         "expire_pending_after_hours")),
    )  # fmt: skip

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
            if name in self.GIB_LABELS:
                self.fields[name] = GiBField(
                    label=self.GIB_LABELS[name], required=field.required, initial=field.initial
                )
                continue
            # Django capitalises a model field's name for its label: "VGPU limit". A vGPU
            # keeps its small v, in both languages.
            label = str(Quota._meta.get_field(name).verbose_name)
            field.label = label if label.startswith("vGPU") else capfirst(label)
            if isinstance(field, forms.IntegerField):
                field.min_value = 0
                field.widget.attrs["min"] = 0

    def fieldsets(self) -> list[tuple[str, list[forms.BoundField]]]:
        """The fields in groups (legend, fields), in the order of FIELDSETS."""
        return [(legend, [self[name] for name in names]) for legend, names in self.FIELDSETS]


class NewUserFieldsMixin:
    """An existing user by name, or a new one made in the same form: ticking ``new_user``
    makes a user of that name with these details (``quotas.tenancy.accounts``)."""

    def add_new_user_fields(self) -> None:
        self.fields["new_user"] = forms.BooleanField(
            label=_("Make a new user with this name"), required=False,
            help_text=_("They get a link to choose their password, shown once on the next "
                        "page for you to pass on."),
        )  # fmt: skip
        self.fields["first_name"] = forms.CharField(
            label=_("First name"), max_length=150, required=False
        )
        self.fields["last_name"] = forms.CharField(
            label=_("Last name"), max_length=150, required=False
        )
        self.fields["email"] = forms.EmailField(label=_("E-mail"), max_length=254, required=False)

    def new_user(self, username_field: str) -> NewUser | None:
        """The user to make, or None when the form names an existing one."""
        data = self.cleaned_data
        if not data.get("new_user"):
            return None
        return NewUser(data[username_field], data["first_name"], data["last_name"], data["email"])

    def user_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in ("new_user", "first_name", "last_name", "email")]


class TenantAddForm(NewUserFieldsMixin, TenantForm):
    """A new tenant and its first admin: an existing user, or one made with it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["admin"] = forms.CharField(
            label=_("First admin"), max_length=150,
            help_text=_("The user name of the tenant's first admin: an active user, or the "
                        "new user to make."),
        )  # fmt: skip
        self.add_new_user_fields()

    def tenant_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in TENANT_FIELDS]

    def service_arguments(self) -> dict:
        data = self.cleaned_data
        new = self.new_user("admin")
        return {
            **{name: data[name] for name in TENANT_FIELDS},
            "admin": "" if new else data["admin"],
            "new_admin": new,
        }


class MemberAddForm(NewUserFieldsMixin, forms.Form):
    username = forms.CharField(label=_("User name"), max_length=150)
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.add_new_user_fields()

    def service_arguments(self) -> dict:
        new = self.new_user("username")
        data = self.cleaned_data
        return {"username": "" if new else data["username"], "role": data["role"],
                "new_user": new}  # fmt: skip


class UserForm(forms.Form):
    """A user made by a platform admin, in no tenant yet."""

    username = forms.CharField(
        label=_("User name"), max_length=150,
        help_text=_("What they sign in with: letters, digits and @ . + - _ only."),
    )  # fmt: skip
    first_name = forms.CharField(label=_("First name"), max_length=150, required=False)
    last_name = forms.CharField(label=_("Last name"), max_length=150, required=False)
    email = forms.EmailField(label=_("E-mail"), max_length=254, required=False)


class UserSearchForm(forms.Form):
    STATES = (("", _("All")), ("active", _("Active")), ("inactive", _("Deactivated")))

    q = forms.CharField(label=_("Search"), max_length=150, required=False)
    state = forms.ChoiceField(label=_("State"), choices=STATES, required=False)

    def active(self) -> bool | None:
        return {"active": True, "inactive": False}.get(self.cleaned_data.get("state") or "")


class MemberRoleForm(forms.Form):
    role = forms.ChoiceField(label=_("Role"), choices=Role.choices)
