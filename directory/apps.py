from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _

# What a company directory keeps of its users: the Users pages refuse to change these.
OWNED_FIELDS = ("first_name", "last_name", "email", "is_active", "password")
# An OpenID Connect provider's: not whether active. The portal cannot ask the provider about
# a user between sign-ins, so stopping an account (its sessions and API tokens) at once is
# the platform admins' step on the Users page (README "Connect a company directory").
OIDC_OWNED_FIELDS = ("first_name", "last_name", "email", "password")


class DirectoryConfig(AppConfig):
    # Sign-in through a company directory (LDAP / Active Directory, or an OpenID Connect
    # provider: directory/oidc.py, imported only when configured): its accounts, the
    # mapping of its groups to tenants and roles, and the periodic check of its users. The
    # top app beside tokens: it reaches quotas through quotas.interface and audit through
    # audit.interface; nothing imports it but the settings and the project's URLs.
    name = "directory"
    verbose_name = _("Company directory")

    def ready(self) -> None:
        from django.db.models import Q

        from directory import lookup, oidc_tokens
        from quotas.interface import own_accounts
        from tokens.interface import add_user_check

        # First match wins: an OpenID Connect provider's accounts, then LDAP's.
        own_accounts(Q(directory_account__source="oidc"), "oidc", OIDC_OWNED_FIELDS)
        own_accounts(Q(directory_account__isnull=False), "ldap", OWNED_FIELDS)
        # A token of a user the directory disabled is refused at its next use once the
        # account's last answer is LDAP_TOKEN_RECHECK_S old, even between periodic checks.
        add_user_check(lookup.still_enabled)
        # And an OpenID Connect user's, with OIDC_TOKEN_RECHECK_S set: their refresh token
        # is tried at the provider (off by default: it needs long-lived refresh tokens).
        add_user_check(oidc_tokens.still_honoured)
        from audit.interface import name_actions

        name_actions({"directory.platform_admin": _("Platform admin granted by the directory")})
