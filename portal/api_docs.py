"""How the API documentation groups and titles the operations: one tag per resource, in the
order a reader meets them, and a summary for each operation ("List pools", "Create a GPU
request"). The five model actions get theirs from the resource's names; every other
operation names its own with ``extend_schema(summary=...)`` in its app.

The schema is built per request (``/api/schema/``), so the tags and summaries come in the
caller's language like the descriptions. The operationIds are drf-spectacular's own, from
the paths: clients may use them, and nothing here changes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy
from drf_spectacular.openapi import AutoSchema


@dataclass(frozen=True)
class Tag:
    name: Promise
    description: Promise


GPU_REQUESTS = Tag(_("GPU requests"), _(
    "Ask for vGPUs in a pool under a tenant's quota; approve or reject, extend, resize "
    "and release. A placed request carries its vGPUs."
))  # fmt: skip
ALLOCATIONS = Tag(_("Allocations"), _(
    "The vGPUs placed on the cards, with how to use each: the launch environment, the "
    "shell exports and the Kubernetes limits."
))  # fmt: skip
POOLS = Tag(_("Pools"), _(
    "Groups of cards that requests are placed in: their matching rules, oversubscription "
    "ratios and placement policy, their cards and capacity."
))  # fmt: skip
POOL_CARDS = Tag(_("Pool cards"), _(
    "The cards of the pools, with their capacity and allocations; clearing a card's cordon."
))  # fmt: skip
NODES = Tag(_("Nodes"), _(
    "The GPU servers and their agents: register, change, test a connection, import many "
    "from a file, drain."
))  # fmt: skip
GPUS = Tag(_("GPUs"), _("The physical cards of the nodes, with their latest readings."))
HISTORY = Tag(_("History"), _(
    "Utilization, memory, power and temperature over time, for one card or a whole node."
))  # fmt: skip
TENANTS = Tag(_("Tenants"), _("Teams that own quotas and members, and what they use."))
MEMBERSHIPS = Tag(_("Memberships"), _("Who belongs to which tenant, and with which role."))
QUOTAS = Tag(_("Quotas"), _("How much of a pool each tenant may hold and borrow."))
USERS = Tag(_("Users"), _(
    "Accounts of the portal: create, deactivate and reactivate them, send a password link."
))  # fmt: skip
PREFERENCES = Tag(_("Your preferences"), _(
    "Your own language and time zone, for your pages, e-mails and IM messages."
))  # fmt: skip
API_TOKENS = Tag(_("API tokens"), _(
    "Your own bearer tokens for scripts and the command-line client; a key is shown once."
))  # fmt: skip
SERVICE_ACCOUNTS = Tag(_("Service accounts"), _(
    "Token-only users of a tenant, for CI jobs, and their tokens."
))  # fmt: skip
IDLE_REPORT = Tag(_("Idle report"), _(
    "vGPUs and cards that sit idle, from the latest scans."
))  # fmt: skip
RECLAIM = Tag(_("Reclaim"), _(
    "Warnings before idle vGPUs are taken back, appeals and their decisions, and the "
    "exemptions that spare a vGPU."
))  # fmt: skip
ACCOUNTING = Tag(_("Accounting"), _(
    "A month's GPU-hours held and used per tenant, user and pool, with their cost."
))  # fmt: skip
ALERT_CHANNELS = Tag(_("Alert channels"), _(
    "Where alerts are sent (e-mail, webhooks, chat), a test message and the deliveries."
))  # fmt: skip
ALERT_RULES = Tag(_("Alert rules"), _("What raises an alert, and how severe it is."))
ALERT_EVENTS = Tag(_("Alert events"), _(
    "Alerts that fired: acknowledge them or resolve them by hand."
))  # fmt: skip
ALERT_SUBSCRIPTIONS = Tag(_("Alert subscriptions"), _(
    "Which alerts reach which channel."
))  # fmt: skip
ALERTMANAGER = Tag(_("Alertmanager webhook"), _(
    "Where Prometheus Alertmanager sends its notifications, with its own bearer token."
))  # fmt: skip
CLUSTERS = Tag(_("Kubernetes clusters"), _(
    "Clusters the portal writes its quotas into (platform admins), their namespaces' tenants "
    "and what the last sync found."
))  # fmt: skip
AUDIT = Tag(_("Audit log"), _("Who changed what, when and from where."))

# The order of the documentation's sections: what a CI job uses first, then the fleet, the
# tenancy, access, the reports, the alerts, the clusters, and the log.
TAGS: tuple[Tag, ...] = (
    GPU_REQUESTS, ALLOCATIONS, POOLS, POOL_CARDS, NODES, GPUS, HISTORY, TENANTS, MEMBERSHIPS,
    QUOTAS, USERS, PREFERENCES, API_TOKENS, SERVICE_ACCOUNTS, IDLE_REPORT, RECLAIM, ACCOUNTING,
    ALERT_CHANNELS, ALERT_RULES, ALERT_EVENTS, ALERT_SUBSCRIPTIONS, ALERTMANAGER, CLUSTERS,
    AUDIT,
)  # fmt: skip


@dataclass(frozen=True)
class Resource:
    tag: Tag
    one: Promise | None = None  # "a pool": what create, retrieve, update and delete name
    many: Promise | None = None  # "pools": what list names


# The first segment after /api/v1/, and what it is.
RESOURCES: dict[str, Resource] = {
    "gpu-requests": Resource(
        GPU_REQUESTS,
        pgettext_lazy("API resource", "a GPU request"),
        pgettext_lazy("API resource", "GPU requests"),
    ),
    "allocations": Resource(
        ALLOCATIONS,
        pgettext_lazy("API resource", "an allocation"),
        pgettext_lazy("API resource", "allocations"),
    ),
    "pools": Resource(
        POOLS, pgettext_lazy("API resource", "a pool"), pgettext_lazy("API resource", "pools")
    ),
    "pool-cards": Resource(
        POOL_CARDS,
        pgettext_lazy("API resource", "a pool card"),
        pgettext_lazy("API resource", "pool cards"),
    ),
    "pool-nodes": Resource(NODES),
    "nodes": Resource(
        NODES, pgettext_lazy("API resource", "a node"), pgettext_lazy("API resource", "nodes")
    ),
    "gpus": Resource(
        GPUS, pgettext_lazy("API resource", "a GPU"), pgettext_lazy("API resource", "GPUs")
    ),
    "tenants": Resource(
        TENANTS, pgettext_lazy("API resource", "a tenant"), pgettext_lazy("API resource", "tenants")
    ),
    "memberships": Resource(
        MEMBERSHIPS,
        pgettext_lazy("API resource", "a membership"),
        pgettext_lazy("API resource", "memberships"),
    ),
    "quotas": Resource(
        QUOTAS, pgettext_lazy("API resource", "a quota"), pgettext_lazy("API resource", "quotas")
    ),
    "users": Resource(
        USERS, pgettext_lazy("API resource", "a user"), pgettext_lazy("API resource", "users")
    ),
    "me": Resource(PREFERENCES),
    "tokens": Resource(
        API_TOKENS,
        pgettext_lazy("API resource", "an API token"),
        pgettext_lazy("API resource", "API tokens"),
    ),
    "service-accounts": Resource(
        SERVICE_ACCOUNTS,
        pgettext_lazy("API resource", "a service account"),
        pgettext_lazy("API resource", "service accounts"),
    ),
    "idle-report": Resource(
        IDLE_REPORT,
        pgettext_lazy("API resource", "an idle allocation"),
        pgettext_lazy("API resource", "idle allocations"),
    ),
    "idle-cards": Resource(
        IDLE_REPORT,
        pgettext_lazy("API resource", "an idle card"),
        pgettext_lazy("API resource", "idle cards"),
    ),
    "reclaim-warnings": Resource(
        RECLAIM,
        pgettext_lazy("API resource", "a reclaim warning"),
        pgettext_lazy("API resource", "reclaim warnings"),
    ),
    "reclaim-exemptions": Resource(
        RECLAIM,
        pgettext_lazy("API resource", "a reclaim exemption"),
        pgettext_lazy("API resource", "reclaim exemptions"),
    ),
    "accounting": Resource(ACCOUNTING),
    "alert-channels": Resource(
        ALERT_CHANNELS,
        pgettext_lazy("API resource", "an alert channel"),
        pgettext_lazy("API resource", "alert channels"),
    ),
    "alert-rules": Resource(
        ALERT_RULES,
        pgettext_lazy("API resource", "an alert rule"),
        pgettext_lazy("API resource", "alert rules"),
    ),
    "alert-events": Resource(
        ALERT_EVENTS,
        pgettext_lazy("API resource", "an alert event"),
        pgettext_lazy("API resource", "alert events"),
    ),
    "alert-subscriptions": Resource(
        ALERT_SUBSCRIPTIONS,
        pgettext_lazy("API resource", "an alert subscription"),
        pgettext_lazy("API resource", "alert subscriptions"),
    ),
    "alertmanager": Resource(ALERTMANAGER),
    "clusters": Resource(
        CLUSTERS,
        pgettext_lazy("API resource", "a cluster"),
        pgettext_lazy("API resource", "clusters"),
    ),
    "audit": Resource(
        AUDIT,
        pgettext_lazy("API resource", "an audit entry"),
        pgettext_lazy("API resource", "audit entries"),
    ),
}

# The model actions, titled from the resource's names.
ACTIONS: dict[str, tuple[Promise, str]] = {
    "list": (_("List %(resources)s"), "many"),
    "create": (_("Create %(resource)s"), "one"),
    "retrieve": (_("Retrieve %(resource)s"), "one"),
    "update": (_("Update %(resource)s"), "one"),
    "partial_update": (_("Partially update %(resource)s"), "one"),
    "destroy": (_("Delete %(resource)s"), "one"),
}


def resource(path: str) -> Resource | None:
    """The resource of an API path (``/api/v1/pools/{id}/cards/``); None for a path of a
    resource not in RESOURCES yet (its operations stay in drf-spectacular's "v1" section,
    and tests/test_api_docs.py fails on them)."""
    return RESOURCES.get(path.removeprefix("/api/v1/").split("/")[0])


def summary(path: str, action: str | None) -> str | None:
    """The summary of a model action on the path's resource; None for any other."""
    found = resource(path)
    if action not in ACTIONS or found is None:
        return None
    text, number = ACTIONS[action]
    noun = found.many if number == "many" else found.one
    if noun is None:
        return None
    key = "resources" if number == "many" else "resource"
    title = str(text) % {key: noun}
    return title[:1].upper() + title[1:]


class PortalAutoSchema(AutoSchema):
    """drf-spectacular's schema, with each operation tagged by its resource and titled."""

    def get_tags(self) -> list[str]:
        if self.path.rstrip("/").endswith("/history"):
            return [str(HISTORY.name)]
        found = resource(self.path)
        return [str(found.tag.name)] if found else super().get_tags()

    def get_summary(self) -> str | None:
        return summary(self.path, getattr(self.view, "action", None))

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict:
        # A serializer's ``ANSWER_MAY_OMIT``: fields some callers' answers leave out (a
        # node's agent details for members), so the response schema must not require them.
        schema = super()._map_basic_serializer(serializer, direction)
        omitted = set(getattr(serializer, "ANSWER_MAY_OMIT", ()))
        if direction == "response" and omitted and "required" in schema:
            schema["required"] = [name for name in schema["required"] if name not in omitted]
            if not schema["required"]:
                del schema["required"]
        return schema


def document_tags(result: dict, generator: Any, request: Any, public: bool) -> dict:
    """The tags in their order, with their descriptions (a postprocessing hook): ReDoc
    and Swagger UI show the sections in this order."""
    used = {tag for item in result.get("paths", {}).values() for op in item.values()
            if isinstance(op, dict) for tag in op.get("tags", [])}  # fmt: skip
    result["tags"] = [
        {"name": str(tag.name), "description": str(tag.description)}
        for tag in TAGS
        if str(tag.name) in used
    ]
    return result
