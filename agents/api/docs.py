"""What the API documentation tells its readers about each node operation.

Written for the people who call the API (CI jobs, scripts), not for those who maintain it:
docstrings stay developer notes, and these replace them in the schema and Swagger UI.
"""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

NODE_OPERATIONS: dict[str, Promise] = {
    "list": _(
        "The registered nodes (GPU servers), by name, with their state, labels and number of "
        "cards. Narrow the list with the query parameters below. An agent's token is "
        "never returned, only its last characters (token_hint)."
    ),
    "retrieve": _("One node, as in the list."),
    "create": _(
        "Register a node by its agent's URL (staff only). The portal reads the agent "
        "from its next poll on. The token is stored encrypted and never returned. A 400 "
        "answer names each field that is wrong."
    ),
    "update": _(
        "Replace a node's name, agent URL, labels and state (staff only). An absent or "
        "empty token keeps the stored one, but a new agent URL needs the token again (the "
        "stored token is only sent to its own URL). A new URL or token is tried at the next "
        "poll."
    ),
    "partial_update": _(
        "Change only the fields given (staff only). An absent or empty token keeps the "
        "stored one, but a new agent URL needs the token again (the stored token is only "
        "sent to its own URL). A new URL or token is tried at the next poll."
    ),
    "destroy": _("Remove a node, with its cards and their history (staff only)."),
    "test_connection": _(
        "Ask an agent for one reading with the given URL and token, as the portal will, "
        "and report what it answered: host name, agent version, cards by model, round "
        "trip, or the error. Nothing is saved (staff only)."
    ),
    "import_nodes": _(
        "Register many nodes from a CSV or YAML file (staff only): the file as the body "
        "(Content-Type text/csv or application/yaml), or JSON with format and content. "
        "All or nothing: if any row is wrong, nothing is written and the 400 answer lists "
        "the errors by row. With update, rows naming registered nodes change them; with "
        "dry_run, every row is checked and nothing is written. 201 when nodes were "
        "added, else 200."
    ),
}
