"""The one cast of test actors: who each is, and the one way to make them.

tests/conftest.py has a fixture for each; tests/tenants.py puts them in their teams;
tests/role_matrix_world.py plays the same parts under its own names (``rm-admin``...).
Each password is the name followed by ``-pw-1``, so a test may log in through the form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser

from tests.factories import UserFactory

NODE_OPERATOR_PERMISSIONS = (
    "agents.add_node",
    "agents.change_node",
    "agents.delete_node",
    "telemetry.view_process_owners",
)
CHANGE_TENANT = "quotas.change_tenant"


@dataclass(frozen=True)
class Part:
    about: str
    fields: dict[str, Any] = field(default_factory=dict)  # UserFactory's keywords


# Tenancy (acme's and bravo's people) comes from tests/tenants.py's teams; a user alone is
# in no tenant.
CAST: dict[str, Part] = {
    "alice": Part("The platform admin: a superuser, allowed everything.", {"is_superuser": True}),
    "oscar": Part(
        "A platform admin by permission alone (quotas.change_tenant): not a superuser, not staff.",
        {"permissions": [CHANGE_TENANT]},
    ),
    "bob": Part(
        "A member: reads the fleet and its history, without process owners; changes nothing. "
        "In the teams, a member of acme holding a GPU."
    ),
    "carol": Part(
        "An operator: not staff, granted the node permissions and the process owners.",
        {"permissions": NODE_OPERATOR_PERMISSIONS},
    ),
    "dave": Part(
        "Staff without permissions, in no tenant: being staff alone grants nothing outside "
        "the admin.",
        {"is_staff": True},
    ),
    "erin": Part("A tenant admin: in the teams, the admin of acme."),
    "andy": Part("An approver: in the teams, acme's approver."),
    "tom": Part("Another tenant's admin: in the teams, the admin of bravo."),
    "bella": Part(
        "An outsider to acme: in the teams, a member of bravo holding a GPU in the shared pool."
    ),
}


def person(name: str, **overrides: Any) -> AbstractBaseUser:
    """The actor ``name`` of the cast, made now; ``overrides`` go to UserFactory (another
    ``username`` plays the same part under another name)."""
    return UserFactory(**{"username": name, **CAST[name].fields, **overrides})
