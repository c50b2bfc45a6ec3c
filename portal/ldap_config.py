"""The company directory's settings (django-auth-ldap's ``AUTH_LDAP_*``), read from the
environment. With no ``LDAP_SERVER_URI`` there are none and nothing imports python-ldap:
the base install stays wheel-only (django-auth-ldap is the ``ldap`` extra).

A malformed value fails at start-up with the variable's name, as ``portal.env`` does.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_float, env_str

GROUP_TYPES = (
    "group_of_names", "group_of_unique_names", "nested_group_of_names", "posix",
    "active_directory", "nested_active_directory",
)  # fmt: skip
LOCAL_LOGIN_CHOICES = ("all", "superusers", "off")


def local_login() -> str:
    """LOCAL_LOGIN: who may sign in with a password kept by the portal itself."""
    value = env_str("LOCAL_LOGIN", "all").lower()
    if value not in LOCAL_LOGIN_CHOICES:
        raise ImproperlyConfigured(
            f"LOCAL_LOGIN must be one of {', '.join(LOCAL_LOGIN_CHOICES)}, not {value!r}"
        )
    return value


def _group_type(name: str) -> Any:
    from django_auth_ldap import config

    kinds = {
        "group_of_names": config.GroupOfNamesType,
        "group_of_unique_names": config.GroupOfUniqueNamesType,
        "nested_group_of_names": config.NestedGroupOfNamesType,
        "posix": config.PosixGroupType,
        "active_directory": config.ActiveDirectoryGroupType,
        "nested_active_directory": config.NestedActiveDirectoryGroupType,
    }
    if name not in kinds:
        raise ImproperlyConfigured(
            f"LDAP_GROUP_TYPE must be one of {', '.join(GROUP_TYPES)}, not {name!r}"
        )
    return kinds[name]()


def ldap_settings() -> dict[str, Any]:
    """The settings to add for the directory, or {} when LDAP_SERVER_URI is not set."""
    uri = env_str("LDAP_SERVER_URI")
    if not uri:
        return {}
    try:
        import ldap
        from django_auth_ldap.config import LDAPSearch
    except ImportError:
        raise ImproperlyConfigured(
            "LDAP_SERVER_URI is set but django-auth-ldap is not installed: "
            "pip install 'gpu-portal[ldap]' (it needs libldap2-dev and libsasl2-dev)."
        ) from None
    base = env_str("LDAP_USER_SEARCH_BASE")
    if not base:
        raise ImproperlyConfigured("LDAP_USER_SEARCH_BASE must be set with LDAP_SERVER_URI")
    user_filter = env_str("LDAP_USER_FILTER", "(uid=%(user)s)")
    if "%(user)s" not in user_filter:
        raise ImproperlyConfigured(
            f"LDAP_USER_FILTER must hold %(user)s where the login name goes, not {user_filter!r}"
        )
    # A disabled account is not found at sign-in, and is deactivated by the periodic check.
    disabled = env_str("LDAP_USER_DISABLED_FILTER")
    search_filter = f"(&{user_filter}(!{disabled}))" if disabled else user_filter
    timeout = env_float("LDAP_TIMEOUT", 5.0, minimum=0.1)
    options: dict[int, Any] = {
        ldap.OPT_NETWORK_TIMEOUT: timeout,
        ldap.OPT_TIMEOUT: timeout,
        # Active Directory answers with referrals python-ldap would chase anonymously.
        ldap.OPT_REFERRALS: 0,
    }
    ca_file = env_str("LDAP_CA_FILE")
    if ca_file:
        options[ldap.OPT_X_TLS_CACERTFILE] = ca_file
        options[ldap.OPT_X_TLS_REQUIRE_CERT] = ldap.OPT_X_TLS_DEMAND
        options[ldap.OPT_X_TLS_NEWCTX] = 0  # last: makes the TLS options above take effect
    name = env_str("LDAP_DIRECTORY_NAME") or f"ldap:{urlsplit(uri).hostname or uri}"
    found: dict[str, Any] = {
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_BIND_DN": env_str("LDAP_BIND_DN"),
        "AUTH_LDAP_BIND_PASSWORD": env_str("LDAP_BIND_PASSWORD"),
        "AUTH_LDAP_USER_SEARCH": LDAPSearch(base, ldap.SCOPE_SUBTREE, search_filter),
        "AUTH_LDAP_START_TLS": env_bool("LDAP_START_TLS"),
        "AUTH_LDAP_CONNECTION_OPTIONS": options,
        "AUTH_LDAP_USER_ATTR_MAP": {
            "first_name": env_str("LDAP_ATTR_FIRST_NAME", "givenName"),
            "last_name": env_str("LDAP_ATTR_LAST_NAME", "sn"),
            "email": env_str("LDAP_ATTR_EMAIL", "mail"),
        },
        # Attributes and groups are read again at every login, never kept from the last.
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        "AUTH_LDAP_CACHE_TIMEOUT": 0,
        "LDAP_DIRECTORY_NAME": name,
        "LDAP_ATTR_DEPARTMENT": env_str("LDAP_ATTR_DEPARTMENT", "departmentNumber"),
    }
    group_base = env_str("LDAP_GROUP_SEARCH_BASE")
    if group_base:
        found["AUTH_LDAP_GROUP_SEARCH"] = LDAPSearch(
            group_base, ldap.SCOPE_SUBTREE, env_str("LDAP_GROUP_FILTER", "(objectClass=*)")
        )
        found["AUTH_LDAP_GROUP_TYPE"] = _group_type(env_str("LDAP_GROUP_TYPE", "group_of_names"))
    return found
