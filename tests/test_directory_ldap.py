"""Sign-in through a company directory: a real OpenLDAP server (tests/ldap_server.py), the
portal configured from the environment as in production (portal/ldap_config.py).

Sign-in succeeds and fails as it should, attributes are synced, groups map to tenants and
roles and are applied again at each login, a disabled user is refused in the pages and the
API (its token within one check of the directory), logins are audited with address and
directory, and the Users pages refuse what the directory owns.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from audit.interface import AuditEntry
from directory.lookup import check_accounts
from directory.models import DirectoryAccount, GroupMapping, MappedRole
from portal.ldap_config import ldap_settings
from quotas.choices import Role
from quotas.models import Membership, Tenant
from quotas.permissions import is_platform_admin
from tests import clients, ldap_server
from tests.factories import directory_mapped_tenant
from tokens.interface import issue

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"
ADDRESS = "203.0.113.40"
NAME = "corp-ldap"


@pytest.fixture(scope="session")
def slapd(tmp_path_factory) -> Iterator[ldap_server.Slapd]:
    folder = tmp_path_factory.mktemp("slapd")
    server = ldap_server.start(folder)
    yield server
    ldap_server.stop(server, folder)


def _environment(monkeypatch, uri: str) -> None:
    for name, value in {
        "LDAP_SERVER_URI": uri,
        "LDAP_BIND_DN": ldap_server.ADMIN_DN,
        "LDAP_BIND_PASSWORD": ldap_server.ADMIN_PW,
        "LDAP_USER_SEARCH_BASE": ldap_server.PEOPLE,
        "LDAP_USER_FILTER": "(uid=%(user)s)",
        "LDAP_USER_DISABLED_FILTER": "(employeeType=disabled)",
        "LDAP_GROUP_SEARCH_BASE": ldap_server.GROUPS,
        "LDAP_GROUP_FILTER": "(objectClass=groupOfNames)",
        "LDAP_DIRECTORY_NAME": NAME,
        "LDAP_TIMEOUT": "2",
    }.items():
        monkeypatch.setenv(name, value)


def _configure(settings, monkeypatch, uri: str) -> None:
    """What portal/settings.py does with the environment, for this test."""
    _environment(monkeypatch, uri)
    found = ldap_settings()
    for key, value in found.items():
        setattr(settings, key, value)
    settings.LDAP = found
    settings.AUTHENTICATION_BACKENDS = [
        "portal.security.LoginLockoutBackend",
        "directory.backends.PortalLDAPBackend",
        "tokens.backends.PortalModelBackend",
    ]


@pytest.fixture
def directory(slapd, settings, monkeypatch) -> ldap_server.Slapd:
    slapd.reset()
    _configure(settings, monkeypatch, slapd.uri)
    return slapd


@pytest.fixture
def quant(bob) -> Tenant:
    return directory_mapped_tenant(bob, ldap_server.group)


def _log_in(username: str, password: str, client: Client | None = None):
    client = client or Client(REMOTE_ADDR=ADDRESS)
    return client, client.post(LOGIN, {"username": username, "password": password})


def _user(name: str):
    return get_user_model().objects.get(username=name)


def _role(user, tenant: Tenant) -> str | None:
    return (
        Membership.objects.filter(user=user, tenant=tenant).values_list("role", flat=True).first()
    )


def test_sign_in_creates_the_user_with_the_directorys_attributes(directory, quant):
    client, response = _log_in("dana", "dana-secret")
    assert response.status_code == 302
    dana = _user("dana")
    assert (dana.first_name, dana.last_name, dana.email) == ("Dana", "Li", "dana@corp.example")
    assert not dana.has_usable_password()  # the directory keeps the password
    account = DirectoryAccount.objects.get(user=dana)
    assert (account.directory, account.dn) == (NAME, ldap_server.person("dana"))
    assert account.department == "Risk"
    assert account.groups == [ldap_server.group("gpu-quant-users")]
    assert account.last_sync is not None
    assert client.get("/account/").status_code == 200
    # Attributes are read again at each login.
    directory.set_attribute("dana", "mail", ["dana.li@corp.example"])
    directory.set_attribute("dana", "departmentNumber", ["Treasury"])
    assert _log_in("dana", "dana-secret")[1].status_code == 302
    dana.refresh_from_db()
    assert dana.email == "dana.li@corp.example"
    assert DirectoryAccount.objects.get(user=dana).department == "Treasury"


def test_a_wrong_password_or_an_unknown_name_is_refused(directory, quant):
    assert _log_in("dana", "not-her-password")[1].status_code == 200
    assert _log_in("nobody", "whatever")[1].status_code == 200
    assert not get_user_model().objects.filter(username__in=["dana", "nobody"]).exists()


def test_groups_map_to_tenants_and_roles(directory, quant):
    _log_in("dana", "dana-secret")
    _log_in("erik", "erik-secret")
    dana, erik = _user("dana"), _user("erik")
    assert _role(dana, quant) == Role.MEMBER
    # In the users, approvers and admins groups: the widest role.
    assert _role(erik, quant) == Role.ADMIN
    assert is_platform_admin(erik) and not is_platform_admin(dana)


def test_a_user_moved_between_groups_changes_role_at_the_next_login(directory, quant):
    _log_in("dana", "dana-secret")
    dana = _user("dana")
    assert _role(dana, quant) == Role.MEMBER
    directory.set_members("gpu-quant-users", ["erik", "gus"])
    directory.set_members("gpu-quant-approvers", ["erik", "dana"])
    assert _role(dana, quant) == Role.MEMBER  # nothing changes before she signs in again
    _log_in("dana", "dana-secret")
    assert _role(dana, quant) == Role.APPROVER
    directory.set_members("gpu-quant-approvers", ["erik"])
    _log_in("dana", "dana-secret")
    assert _role(dana, quant) is None
    entry = AuditEntry.objects.filter(action="membership.delete").latest("id")
    assert entry.actor_id is None and NAME in entry.message and entry.address == ADDRESS
    # Out of the platform admins' group: no longer a platform admin.
    _log_in("erik", "erik-secret")
    assert is_platform_admin(_user("erik"))
    directory.set_members("portal-admins", [])
    _log_in("erik", "erik-secret")
    assert not is_platform_admin(_user("erik"))


def test_memberships_in_tenants_no_mapping_names_are_left_alone(directory, quant):
    other = Tenant.objects.create(name="Ops", slug="ops")
    _log_in("dana", "dana-secret")
    Membership.objects.create(tenant=other, user=_user("dana"), role=Role.MEMBER)
    _log_in("dana", "dana-secret")
    assert _role(_user("dana"), other) == Role.MEMBER


def test_the_last_admin_of_a_tenant_is_kept_and_said(directory, quant, bob):
    _log_in("erik", "erik-secret")
    Membership.objects.filter(user=bob).delete()  # erik is now the only admin
    directory.set_members("gpu-quant-admins", [])
    _log_in("erik", "erik-secret")
    assert _role(_user("erik"), quant) == Role.ADMIN
    assert "Quant" in DirectoryAccount.objects.get(user__username="erik").sync_note


def test_a_disabled_user_is_refused_in_the_pages_and_the_api(directory, quant):
    assert _log_in("gus", "gus-secret")[1].status_code == 200  # disabled from the start
    client, response = _log_in("dana", "dana-secret")
    assert response.status_code == 302
    dana = _user("dana")
    _token, key = issue(dana, name="ci")
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 200
    directory.set_attribute("dana", "employeeType", ["disabled"])
    # The login form asks the directory: refused at once.
    assert _log_in("dana", "dana-secret")[1].status_code == 200
    # The periodic check deactivates her: the token and the open session stop working.
    assert check_accounts() == {"checked": 1, "deactivated": 1}
    dana.refresh_from_db()
    assert not dana.is_active
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401
    assert client.get("/account/").status_code == 302
    entry = AuditEntry.objects.filter(action="user.deactivate").latest("id")
    assert entry.target_id == str(dana.pk) and entry.actor_id is None
    # Enabled again in the directory: her next login lets her in again.
    directory.set_attribute("dana", "employeeType", ["staff"])
    assert _log_in("dana", "dana-secret")[1].status_code == 302
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 200


def test_a_user_removed_from_the_directory_is_deactivated_by_the_check(directory, quant):
    _log_in("dana", "dana-secret")
    _log_in("erik", "erik-secret")
    directory.delete_person("dana")
    directory.set_members("gpu-quant-approvers", [])
    assert check_accounts() == {"checked": 2, "deactivated": 1}
    assert not _user("dana").is_active and _user("erik").is_active
    # The check applies the groups too: erik is no longer an approver there, still admin.
    assert _role(_user("erik"), quant) == Role.ADMIN


def test_the_check_changes_nothing_while_the_directory_is_away(directory, quant, settings,
                                                               monkeypatch):  # fmt: skip
    _log_in("dana", "dana-secret")
    with socket_closed() as uri:
        _configure(settings, monkeypatch, uri)
        result = check_accounts()
    assert result["checked"] == 0 and "error" in result
    assert _user("dana").is_active


class socket_closed:
    """A loopback port nothing listens on, for a directory that is away."""

    def __enter__(self) -> str:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return f"ldap://127.0.0.1:{self.sock.getsockname()[1]}"

    def __exit__(self, *exc) -> None:
        self.sock.close()


def test_logins_and_failed_logins_are_audited_with_address_and_directory(directory, quant):
    _log_in("dana", "dana-secret")
    _log_in("dana", "wrong")
    login = AuditEntry.objects.get(action="login.succeeded")
    assert (login.actor_name, login.address, login.after) == ("dana", ADDRESS, {"directory": NAME})
    failed = AuditEntry.objects.get(action="login.failed")
    assert failed.address == ADDRESS
    assert failed.after["directories"] == [NAME, "local"]
    assert "wrong" not in str(AuditEntry.objects.filter(pk=failed.pk).values().get())


def test_a_local_superuser_is_never_taken_over_by_the_directory(directory, alice):
    # The directory has an "alice" too: her directory password does not open the account.
    assert _log_in("alice", "alice-ldap-pw")[1].status_code == 200
    assert not DirectoryAccount.objects.filter(user=alice).exists()
    assert _log_in("alice", "alice-pw-1")[1].status_code == 302
    login = AuditEntry.objects.filter(action="login.succeeded").latest("id")
    assert login.after == {"directory": "local"}


def test_local_passwords_can_be_kept_to_superusers_or_turned_off(directory, settings, alice, bob):
    settings.LOCAL_LOGIN = "superusers"
    assert _log_in("bob", "bob-pw-1")[1].status_code == 200
    assert _log_in("alice", "alice-pw-1")[1].status_code == 302
    assert _log_in("dana", "dana-secret")[1].status_code == 302  # the directory still signs in
    settings.LOCAL_LOGIN = "off"
    assert _log_in("alice", "alice-pw-1")[1].status_code == 200
    assert _log_in("dana", "dana-secret")[1].status_code == 302


def test_the_users_pages_show_the_source_and_refuse_what_the_directory_owns(
    directory, quant, alice, bob
):
    _log_in("dana", "dana-secret")
    dana = _user("dana")
    page = clients.page(alice)
    detail = page.get(f"/users/{dana.pk}/").content.decode()
    assert 'data-source="ldap"' in detail and "/deactivate/" not in detail
    assert 'data-source="local"' in page.get(f"/users/{bob.pk}/").content.decode()
    listing = page.get("/users/").content.decode()
    assert 'data-source="ldap"' in listing and 'data-source="local"' in listing
    for action in ("deactivate", "password-link"):
        assert page.post(f"/users/{dana.pk}/{action}/").status_code == 403
    api = clients.api(alice)
    assert api.get(f"/api/v1/users/{dana.pk}/").json()["source"] == "ldap"
    assert api.post(f"/api/v1/users/{dana.pk}/deactivate/").status_code == 403
    assert api.post(f"/api/v1/users/{dana.pk}/password-link/").status_code == 403
    dana.refresh_from_db()
    assert dana.is_active
    # A local user is still changed here.
    assert api.post(f"/api/v1/users/{bob.pk}/deactivate/").status_code in (200, 400)


def test_the_directory_page_shows_the_mapping_and_each_users_last_sync(directory, quant,
                                                                       alice, bob):  # fmt: skip
    _log_in("dana", "dana-secret")
    page = clients.page(alice).get("/directory/")
    text = page.content.decode()
    assert page.status_code == 200
    assert ldap_server.group("gpu-quant-admins") in text and 'data-user="dana"' in text
    assert NAME in text and "Risk" in text
    assert clients.page(bob).get("/directory/").status_code == 403


def test_no_server_uri_means_no_directory_settings(monkeypatch):
    monkeypatch.delenv("LDAP_SERVER_URI", raising=False)
    assert ldap_settings() == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [("LDAP_USER_FILTER", "(uid=bob)"), ("LDAP_USER_SEARCH_BASE", ""),
     ("LDAP_GROUP_TYPE", "groupish")],
)  # fmt: skip
def test_a_malformed_directory_setting_fails_with_its_name(slapd, monkeypatch, name, value):
    _environment(monkeypatch, slapd.uri)
    monkeypatch.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        ldap_settings()


def test_a_group_mapping_names_a_tenant_exactly_when_it_is_a_tenant_role(quant):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        GroupMapping(group_dn="cn=x", role=MappedRole.MEMBER).full_clean()
    with pytest.raises(ValidationError):
        GroupMapping(group_dn="cn=x", role=MappedRole.PLATFORM_ADMIN, tenant=quant).full_clean()
    GroupMapping(group_dn="cn=x", role=MappedRole.PLATFORM_ADMIN).full_clean()


SETTINGS_PROBE = """
import json, django
from django.conf import settings
django.setup()
print(json.dumps({
    "backends": settings.AUTHENTICATION_BACKENDS,
    "beat": "check-directory-accounts" in settings.CELERY_BEAT_SCHEDULE,
    "uri": getattr(settings, "AUTH_LDAP_SERVER_URI", None),
    "local": settings.LOCAL_LOGIN,
}))
"""


def _settings_in_child(**env: str | None):
    import subprocess

    from tests import procs

    return subprocess.run(
        [procs.PYTHON, "-c", SETTINGS_PROBE], cwd=procs.REPO, capture_output=True, text=True,
        env=procs.child_env(DJANGO_SETTINGS_MODULE="portal.settings", **env), timeout=60,
        check=False,
    )  # fmt: skip


def test_the_environment_turns_the_directory_on_in_the_settings(slapd):
    import json

    off = _settings_in_child(LDAP_SERVER_URI=None)
    assert off.returncode == 0, off.stderr
    seen = json.loads(off.stdout)
    assert "directory.backends.PortalLDAPBackend" not in seen["backends"]
    assert not seen["beat"] and seen["uri"] is None and seen["local"] == "all"
    on = _settings_in_child(
        LDAP_SERVER_URI=slapd.uri, LDAP_USER_SEARCH_BASE=ldap_server.PEOPLE,
        LOCAL_LOGIN="superusers",
    )  # fmt: skip
    assert on.returncode == 0, on.stderr
    seen = json.loads(on.stdout)
    # Between the lockout check and the portal's own passwords.
    assert seen["backends"][1] == "directory.backends.PortalLDAPBackend"
    assert seen["beat"] and seen["uri"] == slapd.uri and seen["local"] == "superusers"
    bad = _settings_in_child(LOCAL_LOGIN="sometimes")
    assert bad.returncode != 0 and "LOCAL_LOGIN" in bad.stderr


def test_start_tls_checks_the_directorys_certificate(slapd, settings, monkeypatch, tmp_path):
    slapd.reset()
    monkeypatch.setenv("LDAP_START_TLS", "1")
    monkeypatch.setenv("LDAP_CA_FILE", str(slapd.ca_file))
    _configure(settings, monkeypatch, slapd.uri)
    assert _log_in("dana", "dana-secret")[1].status_code == 302
    # A certificate from a CA the portal was not told to trust: no sign-in.
    other, _key, _cert = ldap_server.make_ca(tmp_path, "someone-else")
    monkeypatch.setenv("LDAP_CA_FILE", str(other))
    _configure(settings, monkeypatch, slapd.uri)
    assert _log_in("erik", "erik-secret")[1].status_code == 200
    assert not get_user_model().objects.filter(username="erik").exists()


def test_a_token_is_refused_at_its_next_use_once_the_account_is_disabled(directory, quant,
                                                                          settings):  # fmt: skip
    assert settings.LDAP_TOKEN_RECHECK_S == 0  # the default: ask the directory at every use
    _log_in("dana", "dana-secret")
    dana = _user("dana")
    _token, key = issue(dana, name="ci")
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 200
    directory.set_attribute("dana", "employeeType", ["disabled"])
    # No periodic check has run: the token's own use asks the directory.
    assert clients.bearer(key).get("/api/v1/nodes/").status_code == 401
    dana.refresh_from_db()
    assert not dana.is_active


def test_a_token_is_let_through_on_the_last_answer_while_the_directory_is_away(
    directory, quant, settings, monkeypatch
):
    settings.LDAP_TOKEN_RECHECK_S = 0
    _log_in("dana", "dana-secret")
    _token, key = issue(_user("dana"), name="ci")
    with socket_closed() as uri:
        _configure(settings, monkeypatch, uri)
        assert clients.bearer(key).get("/api/v1/nodes/").status_code == 200
    assert _user("dana").is_active
