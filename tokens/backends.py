"""Django's login backend, refusing service accounts.

A service account's user has no usable password, but a platform admin could give it one
in the Django admin; refusing it here keeps it off the pages whatever its password, and
``get_user`` refusing it too ends any session it might hold. Its API tokens are the only
way in.

``LOCAL_LOGIN`` narrows who may sign in with a password kept here once a company directory
signs people in: everyone (``all``), superusers only (``superusers``, the break-glass admins)
or nobody (``off``). Sessions already open are not ended by it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import ObjectDoesNotExist


class PortalModelBackend(ModelBackend):
    def authenticate(self, request: Any, username: Any = None, password: Any = None,
                     **kwargs: Any) -> Any:  # fmt: skip
        policy = getattr(settings, "LOCAL_LOGIN", "all")
        if policy == "off":
            return None
        if request is not None:  # the audit log's failed login says where it was tried
            request.login_directories = [*getattr(request, "login_directories", []), "local"]
        user = super().authenticate(request, username, password, **kwargs)
        if user is not None and policy == "superusers" and not user.is_superuser:
            return None
        return user

    def user_can_authenticate(self, user: Any) -> bool:
        if not super().user_can_authenticate(user):
            return False
        try:
            user.service_account  # noqa: B018 (the reverse one-to-one, read or absent)
        except ObjectDoesNotExist:
            return True
        return False

    def get_user(self, user_id: Any) -> Any:
        # One query per page, the service account joined in, rather than a second query.
        user = (
            get_user_model()._default_manager.select_related("service_account")
            .filter(pk=user_id).first()
        )  # fmt: skip
        return user if user is not None and self.user_can_authenticate(user) else None
