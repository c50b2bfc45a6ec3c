"""People: the users who sign in, made and stopped from the portal's own pages and API.

Platform admins (``permissions.can_manage_users``) list users, make them, deactivate and
reactivate them; a tenant's admins make a new user only as they invite them
(``quotas.tenancy.services.add_member`` with ``new_user``), and platform admins as they create a
tenant with its first admin. A new user has no password: they choose one through a
set-password link (Django's ``default_token_generator``, read by its standard
``PasswordResetConfirmView``) that the page shows once for the admin to pass on. The link
works until its user sets a password (the token is made from the password hash) or
``PASSWORD_RESET_TIMEOUT`` passes; the admin never knows the password.

Users another app manages (service accounts: ``tokens``) are set apart by that app with
``set_apart`` from its ``AppConfig.ready``: nothing here lists or changes them. Users whose
account a company directory keeps (``directory``, registered with ``own_accounts``) are
listed, with where they come from, but what the directory owns (their name, e-mail, whether
active, their password) is refused here: it is changed in the directory.

The rules, whoever asks:

- nobody deactivates themselves;
- a superuser is deactivated, reactivated or sent a link only by a superuser: a platform
  admin by permission does not stop or take over an account that holds more than theirs;
- the last active admin of a tenant is not deactivated (a tenant keeps an admin); the
  tenants are locked while admins are counted, as ``quotas.tenancy.services`` does;
- a set-password link is made only for an active user who has not set a password yet
  (for one who has, it would let the admin take the account over).

Each change is one transaction, checked first (PermissionError, or ValidationError with
field-level messages and nothing changed) and recorded in the audit log in it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from functools import reduce

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.tokens import default_token_generator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Case, CharField, Q, QuerySet, Value, When
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django.utils.translation import gettext as _

from audit.interface import record, snapshot
from quotas import permissions
from quotas.models import Membership, Tenant

# What the audit log keeps of a user (never the password: ``snapshot`` drops it anyway).
USER_FIELDS = ("username", "first_name", "last_name", "email", "is_active")
NAME_MAX = 150
EMAIL_MAX = 254

_set_apart: list[Q] = []
# (rule over users, the source's name, the fields it owns), from ``own_accounts``.
_owned: list[tuple[Q, str, frozenset[str]]] = []
LOCAL = "local"


@dataclass(frozen=True)
class NewUser:
    """A user to make: the name they sign in with, and optionally who they are."""

    username: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""


def set_apart(rule: Q) -> Q:
    """Register users another app manages (a filter over users); call it from
    ``AppConfig.ready``. They are left out of ``managed_users`` and every change here."""
    _set_apart.append(rule)
    return rule


def own_accounts(rule: Q, source: str, fields: tuple[str, ...]) -> None:
    """Register users whose ``fields`` another system keeps (a company directory: source
    "ldap"); call it from ``AppConfig.ready``. "password" and "is_active" among ``fields``
    refuse the set-password link and (de)activation here."""
    _owned.append((rule, source, frozenset(fields)))


def source_of(user: AbstractBaseUser) -> tuple[str, frozenset[str]]:
    """Where the account comes from ("local", or a registered source) and what it owns."""
    for rule, source, fields in _owned:
        if get_user_model().objects.filter(rule, pk=user.pk).exists():
            return source, fields
    return LOCAL, frozenset()


def with_source(users: QuerySet) -> QuerySet:
    """``users`` with ``account_source``: where each account comes from, in the same query."""
    if not _owned:
        return users.annotate(account_source=Value(LOCAL))
    cases = [When(rule, then=Value(source)) for rule, source, _fields in _owned]
    return users.annotate(
        account_source=Case(*cases, default=Value(LOCAL), output_field=CharField())
    )


def _refuse_owned(user: AbstractBaseUser, field: str) -> None:
    source, fields = source_of(user)
    if field in fields:
        raise PermissionError(
            _("This account comes from the company directory (%(source)s): change it there.")
            % {"source": source}
        )


def managed_users() -> QuerySet:
    """Every user this module lists and changes: all but those set apart."""
    users = get_user_model().objects.all()
    if _set_apart:
        users = users.exclude(reduce(operator.or_, _set_apart))
    return users


def is_managed(user: AbstractBaseUser) -> bool:
    return managed_users().filter(pk=user.pk).exists()


def _refuse_unless(allowed: bool, message: str | None = None) -> None:
    if not allowed:
        raise PermissionError(message or _("You may not make this change."))


# --- making users ------------------------------------------------------------------------


def new_user_errors(new: NewUser, username_field: str = "username") -> dict[str, list[str]]:
    """What is wrong with ``new``, per field (``username_field`` names the form's field
    for the user name: the tenant form's is ``admin``)."""
    model = get_user_model()
    user = model(
        username=(new.username or "").strip(),
        first_name=(new.first_name or "").strip(),
        last_name=(new.last_name or "").strip(),
        email=(new.email or "").strip(),
    )
    user.set_unusable_password()
    errors: dict[str, list[str]] = {}
    try:
        # Model validation: the user name's characters and length, the e-mail's form; the
        # name's uniqueness is asked below, whatever its case.
        user.full_clean(exclude=["password"], validate_unique=False)
    except ValidationError as exc:
        for key, messages in exc.message_dict.items():
            errors.setdefault(username_field if key == "username" else key, []).extend(messages)
    if user.username and model.objects.filter(username__iexact=user.username).exists():
        errors.setdefault(username_field, []).append(_("A user with this name already exists."))
    return errors


def make_user(
    new: NewUser, actor, *, address: str | None = None, tenant_id: int | None = None,
    username_field: str = "username",
) -> AbstractBaseUser:  # fmt: skip
    """Save a user already checked with ``new_user_errors``, inside the caller's
    transaction (the caller has checked who may): no password until they set one. The
    name taken meanwhile by someone else's request is the same field error."""
    user = get_user_model()(
        username=new.username.strip(),
        first_name=(new.first_name or "").strip(),
        last_name=(new.last_name or "").strip(),
        email=(new.email or "").strip(),
    )
    user.set_unusable_password()
    user.clean()  # the user name and e-mail normalized as full_clean checked them
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise ValidationError(
            {username_field: [_("A user with this name already exists.")]}
        ) from None
    record("user.create", user, actor=actor, address=address, tenant_id=tenant_id,
           after=snapshot(user, USER_FIELDS))  # fmt: skip
    return user


def create_user(
    actor, *, username: str, first_name: str = "", last_name: str = "", email: str = "",
    address: str | None = None,
) -> AbstractBaseUser:  # fmt: skip
    """A platform admin makes a user, in no tenant yet; its set-password link is
    ``set_password_path(user)``."""
    _refuse_unless(permissions.can_manage_users(actor))
    new = NewUser(username or "", first_name or "", last_name or "", email or "")
    errors = new_user_errors(new)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        return make_user(new, actor, address=address)


def set_password_path(user: AbstractBaseUser) -> str:
    """The path of the user's set-password page (Django's reset token: it stops working
    once they set a password, or after PASSWORD_RESET_TIMEOUT)."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return reverse("quotas:password_set", args=[uid, default_token_generator.make_token(user)])


def may_set_password(user: AbstractBaseUser | None) -> bool:
    """Whether a set-password link may be used by ``user``: active, managed here, and not
    an account whose password a directory keeps."""
    return (
        user is not None and user.is_active and is_managed(user)
        and "password" not in source_of(user)[1]
    )  # fmt: skip


def record_password_set(user: AbstractBaseUser, *, address: str | None = None) -> None:
    """Note that ``user`` chose their password through a link (Django's SetPasswordForm
    saves it, in the caller's transaction)."""
    record("user.password_set", user, actor=user, address=address)


# --- changing users ----------------------------------------------------------------------


def _managed(user_id: int, *, lock: bool = False) -> AbstractBaseUser:
    users = managed_users()
    if lock:
        # Only the user's row: the set-apart rules may join others' tables (outer joins).
        users = users.select_for_update(of=("self",))
    return users.get(pk=user_id)


def _refuse_over(actor, user: AbstractBaseUser) -> None:
    _refuse_unless(permissions.can_manage_users(actor))
    # Not a test of who is a platform admin: an account holding every permission is
    # changed only by one that does too.
    _refuse_unless(
        not user.is_superuser or actor.is_superuser,
        _("Only a superuser may change a superuser."),
    )


def _last_admin_of(user: AbstractBaseUser) -> list[str]:
    """The tenants of which ``user`` is the last active admin, with those tenants locked."""
    tenant_ids = list(permissions.administered_tenant_ids(user).values_list("tenant_id", flat=True))
    if not tenant_ids:
        return []
    locked = list(Tenant.objects.select_for_update().filter(pk__in=tenant_ids).order_by("pk"))
    others = set(
        Membership.objects.filter(tenant_id__in=tenant_ids)
        .admins()
        .active()
        .exclude(user=user)
        .values_list("tenant_id", flat=True)
    )
    return [t.name for t in locked if t.pk not in others]


def deactivate_user(user_id: int, actor, *, address: str | None = None) -> AbstractBaseUser:
    """Stop a user signing in: their sessions end at their next page, their API tokens
    are refused (``tokens`` finds only active users' tokens) until reactivated. They stay
    members of their tenants; their requests keep their requester."""
    _refuse_unless(permissions.can_manage_users(actor))
    with transaction.atomic():
        user = _managed(user_id, lock=True)
        _refuse_over(actor, user)
        _refuse_owned(user, "is_active")
        if user.pk == actor.pk:
            raise ValidationError({"user": [_("You cannot deactivate yourself.")]})
        if not user.is_active:
            return user
        if tenants := _last_admin_of(user):
            message = _(
                "%(user)s is the last admin of %(tenants)s: make another admin there first."
            ) % {"user": user.get_username(), "tenants": ", ".join(tenants)}
            raise ValidationError({"user": [message]})
        before = snapshot(user, USER_FIELDS)
        user.is_active = False
        user.save(update_fields=["is_active"])
        record("user.deactivate", user, actor=actor, address=address, before=before,
               after=snapshot(user, USER_FIELDS))  # fmt: skip
    return user


def reactivate_user(user_id: int, actor, *, address: str | None = None) -> AbstractBaseUser:
    """Let a deactivated user sign in again, with the tokens they had (those not expired
    or revoked meanwhile) and the password they had."""
    _refuse_unless(permissions.can_manage_users(actor))
    with transaction.atomic():
        user = _managed(user_id, lock=True)
        _refuse_over(actor, user)
        _refuse_owned(user, "is_active")
        if user.is_active:
            return user
        before = snapshot(user, USER_FIELDS)
        user.is_active = True
        user.save(update_fields=["is_active"])
        record("user.reactivate", user, actor=actor, address=address, before=before,
               after=snapshot(user, USER_FIELDS))  # fmt: skip
    return user


def new_password_link(user_id: int, actor, *, address: str | None = None) -> str:
    """A fresh set-password link for a user who has not set a password yet (their first
    link expired or was lost); the path, to be shown once. Recorded, not the link."""
    _refuse_unless(permissions.can_manage_users(actor))
    with transaction.atomic():
        user = _managed(user_id, lock=True)
        _refuse_over(actor, user)
        _refuse_owned(user, "password")
        if not user.is_active:
            raise ValidationError({"user": [_("Reactivate this user first.")]})
        if user.has_usable_password():
            raise ValidationError(
                {"user": [_("This user has set a password already; only they can change it.")]}
            )
        record("user.password_link", user, actor=actor, address=address)
    return set_password_path(user)


def search_users(query: str = "", active: bool | None = None) -> QuerySet:
    """The managed users whose name, full name or e-mail contains ``query``, by name."""
    users = managed_users()
    for word in (query or "").split()[:5]:
        users = users.filter(
            Q(username__icontains=word) | Q(first_name__icontains=word)
            | Q(last_name__icontains=word) | Q(email__icontains=word)
        )  # fmt: skip
    if active is not None:
        users = users.filter(is_active=active)
    return with_source(users).order_by("username")
