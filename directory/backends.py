"""django-auth-ldap's backend, as the portal uses it (settings: portal/ldap_config.py).

At a successful login it applies what the directory says (``sync.apply``) and marks the
user with the directory it came through (the audit log's login entry reads it); every
attempt notes the directory on the request (the failed-login entry reads that). A session
ends once its user is deactivated (django-auth-ldap's own ``get_user`` does not check). An
existing local superuser or service account is never taken over by a directory entry of
the same name: the break-glass account stays local.
"""

from __future__ import annotations

from typing import Any

from django_auth_ldap.backend import LDAPBackend

from audit.interface import request_address
from directory import sync
from directory.models import DirectoryAccount
from quotas.interface import is_managed_user


class PortalLDAPBackend(LDAPBackend):
    def authenticate(self, request: Any, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> Any:  # fmt: skip
        name = sync.directory_name()
        if request is not None:
            request.login_directories = [*getattr(request, "login_directories", []), name]
        user = super().authenticate(request, username, password, **kwargs)
        if user is None:
            return None
        sync.apply(user, user.ldap_user, address=request_address(request))
        user.login_directory = name
        return user

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[Any, bool]:
        user, built = super().get_or_build_user(username, ldap_user)
        taken_over = not built and not DirectoryAccount.objects.filter(user=user).exists()
        if taken_over and (user.is_superuser or not is_managed_user(user)):
            raise ldap_user.AuthenticationFailed(f"{username} is a local account here")
        return user, built

    def get_user(self, user_id: Any) -> Any:
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None
