"""Who may read and who may change nodes: one rule for the API, the pages and the admin.

Reading the fleet is open to every signed-in member, without the agents' addresses, token
hints and error texts (``can_see_agent_details``). Changing it takes Django's model
permissions, the ones the admin checks (``agents.add_node``, ``change_node``,
``delete_node``), so an operator is granted exactly what they need and being staff grants
nothing by itself. The tenancy issue extends these classes rather than adding new checks.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from rest_framework import permissions
from rest_framework.request import Request

VIEW_NODE = "agents.view_node"
ADD_NODE = "agents.add_node"
CHANGE_NODE = "agents.change_node"
DELETE_NODE = "agents.delete_node"
NODE_WRITES = (ADD_NODE, CHANGE_NODE, DELETE_NODE)

User = AbstractBaseUser | AnonymousUser


def can_add_nodes(user: User) -> bool:
    return user.has_perm(ADD_NODE)


def can_change_nodes(user: User) -> bool:
    return user.has_perm(CHANGE_NODE)


def can_manage_nodes(user: User) -> bool:
    """Any node write: enough to see the registration pages and their links."""
    return any(user.has_perm(perm) for perm in NODE_WRITES)


def can_see_agent_details(user: User) -> bool:
    """Agent URLs, token hints and the agents' own error texts: for those granted any node
    permission, Django's ``view_node`` included (what the admin shows them too). Members
    see the fleet without them: where agents live and what they answer is a map of the
    network, and an error text can carry whatever the far end wrote."""
    return any(user.has_perm(perm) for perm in (VIEW_NODE, *NODE_WRITES))


def can_test_connections(user: User) -> bool:
    # A connection test saves nothing, but it is how an agent is checked before adding or
    # editing a node, and it can use a node's stored token: for those who add or change.
    return can_add_nodes(user) or can_change_nodes(user)


class NodePermissions(permissions.DjangoModelPermissions):
    """Reads for any signed-in member; writes by model permission, as the admin checks them.

    Reads need no permission (DjangoModelPermissions maps ``GET`` to none). ``POST`` takes
    ``add_node``, ``PUT`` and ``PATCH`` ``change_node``, ``DELETE`` ``delete_node``; the
    extra actions name their own (``action_perms``). An import that updates registered
    nodes also needs ``change_node``, which the view checks once it has read the request.
    """

    # Extra actions by name: a callable of the user.
    action_perms = {
        "import_nodes": can_add_nodes,
        "test_connection": can_test_connections,
    }

    def has_permission(self, request: Request, view) -> bool:
        check = self.action_perms.get(getattr(view, "action", None) or "")
        if check is None:
            return super().has_permission(request, view)
        user = request.user
        return bool(user and user.is_authenticated and check(user))
