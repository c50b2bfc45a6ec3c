"""What the API documentation tells its readers about each node operation.

Written for the people who call the API (CI jobs, scripts), not for those who maintain it:
docstrings stay developer notes, and these replace them in the schema and Swagger UI.
"""

from __future__ import annotations

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiExample

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

# The answers the schema types only as objects, as they come.
TEST_CONNECTION_EXAMPLES = [
    OpenApiExample(
        "The agent answered", response_only=True, status_codes=["200"],
        value={"ok": True, "error": "", "hostname": "gpu-node-07", "agent_version": "1.4.0",
               "gpu_count": 8, "models": {"NVIDIA A100-SXM4-80GB": 8}, "latency_ms": 12.4},
    ),
    OpenApiExample(
        "The agent refused the token", response_only=True, status_codes=["200"],
        value={"ok": False, "error": "The agent refused the token (HTTP 401).", "hostname": "",
               "agent_version": "", "gpu_count": 0, "models": {}, "latency_ms": 9.8},
    ),
]  # fmt: skip

IMPORT_EXAMPLES = [
    OpenApiExample(
        "Two nodes added", response_only=True, status_codes=["201"],
        value={"created": ["gpu-node-08", "gpu-node-09"], "updated": [], "unchanged": [],
               "dry_run": False, "errors": []},
    ),
    OpenApiExample(
        "A dry run with update", response_only=True, status_codes=["200"],
        value={"created": ["gpu-node-09"], "updated": ["gpu-node-07"],
               "unchanged": ["gpu-node-08"], "dry_run": True, "errors": []},
    ),
]  # fmt: skip

# Bodies a caller can send as they are: a CI engineer's starting point, and schemathesis'
# valid creates for its stateful phase.
NODE_EXAMPLES = [
    OpenApiExample(
        "A node with its agent's token and labels", request_only=True,
        value={"name": "gpu-node-07", "agent_url": "http://gpu-node-07.example.internal:9400",
               "token": "agent-token-from-the-nodes-config", "labels": {"zone": "rack-3"},
               "state": "online"},
    ),
]  # fmt: skip

TEST_CONNECTION_EXAMPLES.insert(0, OpenApiExample(
    "An agent and its token", request_only=True,
    value={"agent_url": "http://gpu-node-07.example.internal:9400",
           "token": "agent-token-from-the-nodes-config"},
))  # fmt: skip

IMPORT_EXAMPLES.insert(0, OpenApiExample(
    "Two nodes in CSV, as JSON", request_only=True,
    value={"format": "csv", "update": False,
           "content": "name,agent_url,labels,state\n"
                      "gpu-node-08,http://gpu-node-08.example.internal:9400,zone=rack-4,online\n"
                      "gpu-node-09,http://gpu-node-09.example.internal:9400,zone=rack-4,online\n"},
))  # fmt: skip
