"""Every operation of /api/v1/ by every caller, declared in one table and tried for real.

The table names each operation as the OpenAPI schema does (``METHOD /api/v1/path/{id}/``)
and the status each caller gets, in the order of ``CALLERS``:

    anon      no credentials: 401 with ``WWW-Authenticate: Bearer realm="api"``
    read      the platform admin's read-only token: the admin's answer to GET, 403 to writes
    admin     the platform admin (a superuser)
    padmin    a platform admin by permission alone (``quotas.change_tenant``): the admin's
              answer wherever tenancy decides, refused where another permission does
              (nodes, pools and their operations, the audit log)
    tadmin    tenant A's admin
    approver  tenant A's approver
    member    a member of tenant A (the requester of A's GPU requests)
    outsider  a member of tenant B: A's objects are 404 where the pages hide them, 403
              where the pages show them but refuse
    staff     staff without a permission, in no tenant: nobody in particular

A new endpoint fails ``test_every_operation_of_the_api_has_a_row`` until it is declared; a
row whose endpoint went fails ``test_every_row_is_an_operation_of_the_api``. Each caller's
call runs in a savepoint rolled back after it, against a world built once for the module
(tests/role_matrix_world.py); a refused write must leave the database as it was (row
counts, the audit log and the object's own row), an allowed one must change it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import requests
import schemathesis
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from rest_framework.test import APIClient
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.core.transport import Response
from schemathesis.specs.openapi.schemas import OpenApiSchema

from agents.models import GPU, Node
from alerts.models import Channel, Delivery, Event, Rule, Subscription
from audit.models import AuditEntry
from clusters.models import Cluster, NamespaceMapping
from pools.models import Allocation, Lease, Pool, PoolCard
from quotas.models import GpuRequest, Membership, Notice, Quota, Tenant, UserPreference
from reports.models import Exemption, IdleCard, ReclaimWarning
from tests.role_matrix_world import CALLERS, World, build_world
from tokens.authentication import READ_ONLY
from tokens.models import ApiToken, ServiceAccount

METHODS = ("get", "post", "put", "patch", "delete")
Body = dict[str, Any] | Callable[[World], dict[str, Any]] | None


@dataclass(frozen=True)
class Row:
    answers: dict[str, int]  # caller -> status
    on: str | None  # the World attribute that fills {id}
    body: Body
    args: dict[str, str]  # other placeholders -> World attributes
    target: str | None  # whose row a refused write must leave as it was
    changes: bool  # whether an allowed write changes the database


def row(answers: str, on: str | None = None, body: Body = None, *, target: str | None = None,
        changes: bool = True, **args: str) -> Row:  # fmt: skip
    statuses = [int(status) for status in answers.split()]
    assert len(statuses) == len(CALLERS), answers
    return Row(dict(zip(CALLERS, statuses, strict=True)), on, body, args, target or on, changes)


def _soon() -> str:
    return (timezone.now() + timedelta(days=30)).isoformat()


# fmt: off
# Columns: anon read admin padmin tadmin approver member outsider staff (CALLERS).
TABLE: dict[str, Row] = {
    "GET /api/v1/accounting/": row("401 200 200 200 200 200 200 200 200"),
    # Alert channels: one's own and one's tenants' as their admin; another's is 404.
    # A tenant's channel is made by its admins: the others' choice of A is a 400 on tenant.
    "GET /api/v1/alert-channels/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/alert-channels/":
        row("401 403 201 201 201 400 400 400 400", body=lambda w: {
            "name": "rm new", "kind": "slack", "tenant": w.tenant_a,
            "settings": {"url": "https://hooks.slack.com/services/new"}}),
    "GET /api/v1/alert-channels/{id}/": row("401 200 200 200 200 404 404 404 404", "channel"),
    "PUT /api/v1/alert-channels/{id}/":
        row("401 403 200 200 200 404 404 404 404", "channel", {
            "name": "rm ops 2", "kind": "slack",
            "settings": {"url": "https://hooks.slack.com/services/rm2"}}),
    "PATCH /api/v1/alert-channels/{id}/":
        row("401 403 200 200 200 404 404 404 404", "channel", {"name": "rm ops 2"}),
    "DELETE /api/v1/alert-channels/{id}/": row("401 403 204 204 204 404 404 404 404", "channel"),
    "GET /api/v1/alert-channels/{id}/deliveries/":
        row("401 200 200 200 200 404 404 404 404", "channel"),
    "POST /api/v1/alert-channels/{id}/test/": row("401 403 202 202 202 404 404 404 404", "channel"),
    # Events: seen by A's people; acknowledged and resolved by its admins and approvers.
    "GET /api/v1/alert-events/": row("401 200 200 200 200 200 200 200 200"),
    "GET /api/v1/alert-events/{id}/": row("401 200 200 200 200 200 200 404 404", "event"),
    "POST /api/v1/alert-events/{id}/acknowledge/":
        row("401 403 200 200 200 200 403 404 404", "event"),
    "POST /api/v1/alert-events/{id}/resolve/": row("401 403 200 200 200 200 403 404 404", "event"),
    # Rules: read by those they apply to (A's rule: A's people), changed by the platform admin.
    "GET /api/v1/alert-rules/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/alert-rules/":
        row("401 403 201 201 403 403 403 403 403", body={
            "name": "rm hot", "condition": "temperature_c", "threshold": 75,
            "for_seconds": 60, "severity": "warning"}),
    "GET /api/v1/alert-rules/{id}/": row("401 200 200 200 200 200 200 404 404", "rule"),
    "PUT /api/v1/alert-rules/{id}/":
        row("401 403 200 200 403 403 403 404 404", "rule", lambda w: {
            "name": "rm quota", "condition": "quota_used_pct", "threshold": 60,
            "scope_kind": "tenant", "scope_id": w.tenant_a}),
    "PATCH /api/v1/alert-rules/{id}/":
        row("401 403 200 200 403 403 403 404 404", "rule", {"threshold": 70}),
    "DELETE /api/v1/alert-rules/{id}/": row("401 403 204 204 403 403 403 404 404", "rule"),
    # Subscriptions: as channels.
    "GET /api/v1/alert-subscriptions/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/alert-subscriptions/":
        row("401 403 201 201 201 400 400 400 400", body=lambda w: {
            "channel": w.channel, "tenant": w.tenant_a, "min_severity": "critical"}),
    "GET /api/v1/alert-subscriptions/{id}/":
        row("401 200 200 200 200 404 404 404 404", "subscription"),
    "PUT /api/v1/alert-subscriptions/{id}/":
        row("401 403 200 200 200 404 404 404 404", "subscription", lambda w: {
            "channel": w.channel, "min_severity": "critical"}),
    "PATCH /api/v1/alert-subscriptions/{id}/":
        row("401 403 200 200 200 404 404 404 404", "subscription", {"min_severity": "critical"}),
    "DELETE /api/v1/alert-subscriptions/{id}/":
        row("401 403 204 204 204 404 404 404 404", "subscription"),
    # Alertmanager's webhook takes its own bearer token, which no caller has.
    "POST /api/v1/alertmanager/": row("401 401 401 401 401 401 401 401 401", body={"alerts": []}),
    "GET /api/v1/allocations/": row("401 200 200 200 200 200 200 200 200"),
    "GET /api/v1/allocations/{id}/": row("401 200 200 200 200 200 200 404 404", "allocation"),
    # The audit log: its own permission (audit.view_auditentry), which a superuser holds
    # and being a platform admin does not give.
    # Kubernetes clusters: platform admins only (a read token reads them).
    "GET /api/v1/clusters/": row("401 200 200 200 403 403 403 403 403"),
    "POST /api/v1/clusters/":
        row("401 403 201 201 403 403 403 403 403", body=lambda w: {
            "name": "rm-new", "api_url": "https://k8s.example", "token": "rm-new-token",
            "enforcement": "hami", "pool": w.pool}),
    "GET /api/v1/clusters/{id}/": row("401 200 200 200 403 403 403 403 403", "cluster"),
    "PUT /api/v1/clusters/{id}/":
        row("401 403 200 200 403 403 403 403 403", "cluster", {
            "name": "rm-cluster-2", "api_url": "https://k8s-2.example", "enforcement": "hami",
            "kueue": True}),
    "PATCH /api/v1/clusters/{id}/":
        row("401 403 200 200 403 403 403 403 403", "cluster", {"api_url": "https://k8s-2.example"}),
    # Its Job holds the pending request: the cluster stays (409) until that ends.
    "DELETE /api/v1/clusters/{id}/": row("401 403 409 409 403 403 403 403 403", "cluster"),
    "DELETE /api/v1/clusters/{id}/namespaces/{namespace}/":
        row("401 403 204 204 403 403 403 403 403", "cluster", namespace="spare_namespace"),
    "POST /api/v1/clusters/{id}/namespaces/":
        row("401 403 201 201 403 403 403 403 403", "cluster", lambda w: {
            "namespace": "rm-a", "tenant": w.tenant_a}),
    # Jobs made through the API: by the members of a tenant with a namespace on the cluster
    # (and platform admins); a cluster with none of one's namespaces is 404. The body's image
    # is bad, so the allowed get a 400 and the cluster (unreachable) is never written.
    "POST /api/v1/clusters/{cluster_ref}/jobs/":
        row("401 403 400 400 400 400 400 404 404", body={
            "namespace": "rm-jobs", "image": "Not An Image!", "command": ["true"]},
            cluster_ref="cluster"),
    "GET /api/v1/clusters/{cluster_ref}/jobs/{id}/":
        row("401 200 200 200 200 200 200 404 404", "cluster_job", cluster_ref="cluster"),
    "GET /api/v1/audit/": row("401 200 200 403 403 403 403 403 403"),
    "GET /api/v1/audit/{id}/": row("401 200 200 403 403 403 403 403 403", "audit_entry"),
    # GPU requests: A's are 404 to others; members ask (the platform admin is no member:
    # a 400 on tenant); approvers decide, never their own; requester and admins manage.
    "GET /api/v1/gpu-requests/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/gpu-requests/":
        row("401 403 400 400 201 201 201 400 400", body=lambda w: {
            "tenant": w.tenant_a, "pool": w.pool, "compute_pct": 25, "memory_mib": 8192,
            "duration_hours": 4, "reason": "matrix"}),
    "GET /api/v1/gpu-requests/{id}/": row("401 200 200 200 200 200 200 404 404", "pending"),
    "POST /api/v1/gpu-requests/{id}/approve/":
        row("401 403 200 200 200 200 403 404 404", "pending"),
    "POST /api/v1/gpu-requests/{id}/reject/": row("401 403 200 200 200 200 403 404 404", "pending"),
    "POST /api/v1/gpu-requests/{id}/approve-extension/":
        row("401 403 200 200 200 200 403 404 404", "extending"),
    "POST /api/v1/gpu-requests/{id}/reject-extension/":
        row("401 403 200 200 200 200 403 404 404", "extending"),
    "POST /api/v1/gpu-requests/{id}/extend/":
        row("401 403 200 200 200 403 200 404 404", "allocated", {"hours": 1}),
    "POST /api/v1/gpu-requests/{id}/release/":
        row("401 403 200 200 200 403 200 404 404", "allocated"),
    "POST /api/v1/gpu-requests/{id}/resize/":
        row("401 403 200 200 200 403 200 404 404", "allocated",
            {"compute_pct": 30, "memory_mib": 8192}),
    # The fleet: read by everyone signed in.
    "GET /api/v1/gpus/": row("401 200 200 200 200 200 200 200 200"),
    "GET /api/v1/gpus/{id}/": row("401 200 200 200 200 200 200 200 200", "gpu"),
    "GET /api/v1/gpus/{id}/history/": row("401 200 200 200 200 200 200 200 200", "gpu"),
    # Idle report: a member reads their tenants' rows; the cards are the fleet's.
    "GET /api/v1/idle-cards/": row("401 200 200 200 200 200 200 200 200"),
    "GET /api/v1/idle-cards/{gpu_id}/":
        row("401 200 200 200 404 404 404 404 404", gpu_id="idle_card"),
    "GET /api/v1/idle-report/": row("401 200 200 200 200 200 200 200 200"),
    "GET /api/v1/idle-report/{allocation_id}/":
        row("401 200 200 200 200 200 200 404 404", allocation_id="allocation"),
    # Memberships: read by the tenant's people, managed by its admins; another tenant's
    # id in a body is "does not exist" (400).
    "GET /api/v1/memberships/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/memberships/":
        row("401 403 201 201 201 403 403 400 400", body=lambda w: {
            "tenant": w.tenant_a, "username": "rm-outsider", "role": "member"}),
    "GET /api/v1/memberships/{id}/": row("401 200 200 200 200 200 200 404 404", "membership"),
    "PUT /api/v1/memberships/{id}/":
        row("401 403 200 200 200 403 403 404 404", "membership", lambda w: {
            "tenant": w.tenant_a, "username": "rm-member", "role": "approver"}),
    "PATCH /api/v1/memberships/{id}/":
        row("401 403 200 200 200 403 403 404 404", "membership", {"role": "approver"}),
    "DELETE /api/v1/memberships/{id}/": row("401 403 204 204 204 403 403 404 404", "membership"),
    # Nodes: read by everyone signed in, changed with the node permissions.
    "GET /api/v1/nodes/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/nodes/":
        row("401 403 201 403 403 403 403 403 403", body={
            "name": "rm-new", "agent_url": "http://127.0.0.1:1/rm-new",
            "token": "tok-0123456789-new"}),
    "GET /api/v1/nodes/{id}/": row("401 200 200 200 200 200 200 200 200", "spare_node"),
    "PUT /api/v1/nodes/{id}/":
        row("401 403 200 403 403 403 403 403 403", "spare_node", {
            "name": "rm-renamed", "agent_url": "http://127.0.0.1:1/rm-renamed",
            "token": "tok-0123456789-renamed"}),
    "PATCH /api/v1/nodes/{id}/":
        row("401 403 200 403 403 403 403 403 403", "spare_node", {"labels": {"rack": "r9"}}),
    "DELETE /api/v1/nodes/{id}/": row("401 403 204 403 403 403 403 403 403", "spare_node"),
    "GET /api/v1/nodes/{id}/history/": row("401 200 200 200 200 200 200 200 200", "node"),
    "POST /api/v1/nodes/import/":
        row("401 403 201 403 403 403 403 403 403", body={
            "format": "csv", "content": "name,agent_url\nrm-imported,http://127.0.0.1:1/x\n"}),
    "POST /api/v1/nodes/test-connection/":
        row("401 403 200 403 403 403 403 403 403", body={"agent_url": "http://127.0.0.1:1/x"},
            changes=False),
    # Pools: read by everyone signed in, changed with the pool permissions.
    "GET /api/v1/pool-cards/": row("401 200 200 200 200 200 200 200 200"),
    "GET /api/v1/pool-cards/{id}/": row("401 200 200 200 200 200 200 200 200", "cordoned_card"),
    "POST /api/v1/pool-cards/{id}/clear-cordon/":
        row("401 403 200 403 403 403 403 403 403", "cordoned_card"),
    "POST /api/v1/pool-nodes/{id}/drain/": row("401 403 200 403 403 403 403 403 403", "node"),
    "GET /api/v1/pools/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/pools/":
        row("401 403 201 403 403 403 403 403 403", body={"name": "rm-new", "slug": "rm-new"}),
    "GET /api/v1/pools/{id}/": row("401 200 200 200 200 200 200 200 200", "pool"),
    "PUT /api/v1/pools/{id}/":
        row("401 403 200 403 403 403 403 403 403", "pool", {
            "name": "rm-pool", "slug": "rm-pool", "description": "for the matrix"}),
    "PATCH /api/v1/pools/{id}/":
        row("401 403 200 403 403 403 403 403 403", "pool", {"description": "for the matrix"}),
    "DELETE /api/v1/pools/{id}/": row("401 403 204 403 403 403 403 403 403", "spare_pool"),
    "GET /api/v1/pools/{id}/capacity/": row("401 200 200 200 200 200 200 200 200", "pool"),
    "GET /api/v1/pools/{id}/cards/": row("401 200 200 200 200 200 200 200 200", "pool"),
    "POST /api/v1/pools/{id}/cards/add/":
        row("401 403 200 403 403 403 403 403 403", "pool", lambda w: {"gpus": [w.free_gpu]}),
    "POST /api/v1/pools/{id}/cards/remove/":
        row("401 403 200 403 403 403 403 403 403", "spare_pool",
            lambda w: {"gpus": [w.spare_pool_gpu]}, target="spare_pool_card"),
    # Quotas: read by the tenant's people, set by platform admins.
    "GET /api/v1/quotas/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/quotas/":
        row("401 403 201 201 403 403 403 403 403", body=lambda w: {
            "tenant": w.tenant_a, "pool": w.spare_pool, "limit_vgpus": 2,
            "limit_gpu_hours": 5}),
    "GET /api/v1/quotas/{id}/": row("401 200 200 200 200 200 200 404 404", "quota_a"),
    "PUT /api/v1/quotas/{id}/":
        row("401 403 200 200 403 403 403 404 404", "quota_a", lambda w: {
            "tenant": w.tenant_a, "pool": w.pool, "limit_vgpus": 9}),
    "PATCH /api/v1/quotas/{id}/":
        row("401 403 200 200 403 403 403 404 404", "quota_a", {"limit_vgpus": 9}),
    "DELETE /api/v1/quotas/{id}/": row("401 403 204 204 403 403 403 404 404", "quota_a"),
    # Reclaim: exemptions by the lease's tenant's approvers and admins; a refusal is told
    # as absence (404), and another tenant's lease in a body does not exist (400).
    "GET /api/v1/reclaim-exemptions/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/reclaim-exemptions/":
        row("401 403 201 201 201 201 404 400 400", body=lambda w: {
            "lease": w.extending_lease, "reason": "matrix", "ends_at": _soon()}),
    "GET /api/v1/reclaim-exemptions/{id}/": row("401 200 200 200 200 200 200 404 404", "exemption"),
    "DELETE /api/v1/reclaim-exemptions/{id}/":
        row("401 403 204 204 204 204 404 404 404", "exemption"),
    # Warnings: the lease's holder alone appeals; an approver other than the holder decides.
    "GET /api/v1/reclaim-warnings/": row("401 200 200 200 200 200 200 200 200"),
    "GET /api/v1/reclaim-warnings/{id}/": row("401 200 200 200 200 200 200 404 404", "warning"),
    "POST /api/v1/reclaim-warnings/{id}/appeal/":
        row("401 403 404 404 404 404 200 404 404", "warning", {"reason": "still needed"}),
    "POST /api/v1/reclaim-warnings/{id}/decide/":
        row("401 403 200 200 200 200 404 404 404", "appealed", {"grant": True}),
    # Service accounts: listed to the tenant's people, managed by its admins.
    "GET /api/v1/service-accounts/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/service-accounts/":
        row("401 403 201 201 201 403 403 400 400", body=lambda w: {
            "tenant": w.tenant_a, "name": "rm-new"}),
    "GET /api/v1/service-accounts/{id}/":
        row("401 200 200 200 200 200 200 404 404", "service_account"),
    "DELETE /api/v1/service-accounts/{id}/":
        row("401 403 204 204 204 403 403 404 404", "service_account"),
    "GET /api/v1/service-accounts/{id}/tokens/":
        row("401 200 200 200 200 403 403 404 404", "service_account"),
    "POST /api/v1/service-accounts/{id}/tokens/":
        row("401 403 201 201 201 403 403 404 404", "service_account", {"name": "ci-2"}),
    "DELETE /api/v1/service-accounts/{id}/tokens/{token_id}/":
        row("401 403 204 204 204 403 403 404 404", "service_account", token_id="service_token",
            target="service_token"),
    # Tenants: read by their people, changed by platform admins. C is A's people without
    # GPU requests, so that a delete can succeed.
    "GET /api/v1/tenants/": row("401 200 200 200 200 200 200 200 200"),
    # A tenant is created with its first admin.
    "POST /api/v1/tenants/":
        row("401 403 201 201 403 403 403 403 403", body={
            "name": "rm-new", "slug": "rm-new", "admin": "rm-member"}),
    "GET /api/v1/tenants/{id}/": row("401 200 200 200 200 200 200 404 404", "tenant_a"),
    "PUT /api/v1/tenants/{id}/":
        row("401 403 200 200 403 403 403 404 404", "tenant_a", {"name": "rm-a2", "slug": "rm-a"}),
    "PATCH /api/v1/tenants/{id}/":
        row("401 403 200 200 403 403 403 404 404", "tenant_a", {"description": "matrix"}),
    "DELETE /api/v1/tenants/{id}/": row("401 403 204 204 403 403 403 404 404", "tenant_c"),
    "GET /api/v1/tenants/{id}/usage/": row("401 200 200 200 200 200 200 404 404", "tenant_a"),
    # Users: platform admins only; nobody else reads the list of people (403, not 404:
    # the list is not a tenant's to hide).
    "GET /api/v1/users/": row("401 200 200 200 403 403 403 403 403"),
    "POST /api/v1/users/":
        row("401 403 201 201 403 403 403 403 403", body={"username": "rm-new-user"}),
    "GET /api/v1/users/{id}/": row("401 200 200 200 403 403 403 403 403", "spare_user"),
    "POST /api/v1/users/{id}/deactivate/":
        row("401 403 200 200 403 403 403 403 403", "spare_user"),
    "POST /api/v1/users/{id}/reactivate/":
        row("401 403 200 200 403 403 403 403 403", "inactive_user"),
    "POST /api/v1/users/{id}/password-link/":
        row("401 403 200 200 403 403 403 403 403", "spare_user"),
    # Preferences: one's own, for everyone; a read token reads them and changes nothing.
    "GET /api/v1/me/preferences/": row("401 200 200 200 200 200 200 200 200"),
    "PATCH /api/v1/me/preferences/":
        row("401 403 200 200 200 200 200 200 200", body={"time_zone": "Asia/Shanghai"}),
    # Tokens: one's own only, for everyone (a platform admin included).
    "GET /api/v1/tokens/": row("401 200 200 200 200 200 200 200 200"),
    "POST /api/v1/tokens/": row("401 403 201 201 201 201 201 201 201", body={"name": "rm-new"}),
    "GET /api/v1/tokens/{id}/": row("401 404 404 404 404 404 200 404 404", "spare_token"),
    "DELETE /api/v1/tokens/{id}/": row("401 403 404 404 404 404 204 404 404", "spare_token"),
}
# fmt: on

# What a refused write must leave as it was: these tables' row counts ...
COUNTED: tuple[type[Model], ...] = (
    AuditEntry, GpuRequest, Membership, Quota, Tenant, Pool, PoolCard, Node, GPU, Lease,
    Allocation, Channel, Delivery, Subscription, Rule, Event, ApiToken, ServiceAccount,
    Exemption, ReclaimWarning, Notice, UserPreference, Cluster, NamespaceMapping,
    get_user_model(),
)  # fmt: skip
# ... and the row of the object it acts on, by the World attribute naming it.
TARGETS: dict[str, type[Model]] = {
    "channel": Channel, "event": Event, "rule": Rule, "subscription": Subscription,
    "pending": GpuRequest, "allocated": GpuRequest, "extending": GpuRequest,
    "membership": Membership, "spare_node": Node, "node": Node, "cordoned_card": PoolCard,
    "pool": Pool, "spare_pool": Pool, "spare_pool_card": PoolCard, "quota_a": Quota,
    "exemption": Exemption, "warning": ReclaimWarning, "appealed": ReclaimWarning,
    "service_account": ServiceAccount, "service_token": ApiToken, "spare_token": ApiToken,
    "tenant_a": Tenant, "tenant_c": Tenant, "idle_card": IdleCard,
    "spare_user": get_user_model(), "inactive_user": get_user_model(), "cluster": Cluster,
}  # fmt: skip


@functools.cache
def api_schema() -> OpenApiSchema:
    """The generated OpenAPI document, loaded by schemathesis to judge each answer."""
    document = json.loads(OpenApiJsonRenderer().render(
        SchemaGenerator().get_schema(request=None, public=True)
    ))  # fmt: skip
    return schemathesis.openapi.from_dict(document)


def _off_schema(method: str, template: str, url: str, response) -> str | None:
    """What the schema does not allow in ``response`` (its status code, media type and
    body), or None: the answer as schemathesis would have judged it over HTTP."""
    sent = Response(
        status_code=response.status_code,
        headers={name.lower(): [value] for name, value in response.headers.items()},
        content=response.content,
        request=requests.Request(method, f"http://testserver{url}").prepare(),
        elapsed=0.0, verify=True,
    )  # fmt: skip
    try:
        api_schema()[template][method].validate_response(sent)
    except FailureGroup as failures:
        return "; ".join(f"{f.title}: {f.message}"[:300] for f in failures.exceptions)
    except Failure as failure:
        return f"{failure.title}: {failure.message}"[:300]
    return None


@functools.cache
def operations() -> frozenset[str]:
    """Every operation under /api/v1/ in the generated OpenAPI schema."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return frozenset(
        f"{method.upper()} {path}"
        for path, items in schema["paths"].items()
        if path.startswith("/api/v1/")
        for method in items
        if method in METHODS
    )


def test_every_operation_of_the_api_has_a_row() -> None:
    missing = sorted(operations() - TABLE.keys())
    assert not missing, f"declare who gets what in TABLE for: {missing}"


def test_every_row_is_an_operation_of_the_api() -> None:
    stale = sorted(TABLE.keys() - operations())
    assert not stale, f"TABLE declares operations the API no longer has: {stale}"


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker) -> Iterator[World]:
    """Built once in a transaction of the module's own, rolled back at its end; each test
    runs in a savepoint inside it (pytest-django's ``db``), each caller in one more."""
    with django_db_blocker.unblock(), transaction.atomic():
        world = build_world()
        yield world
        transaction.set_rollback(True)


# One query for all the counts (our own table names, nothing from outside).
_COUNT = "(SELECT count(*) FROM {})"
COUNTS = "SELECT " + ", ".join(_COUNT.format(m._meta.db_table) for m in COUNTED)


def _state(target: str | None, world: World) -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(COUNTS)
        state = cursor.fetchone()
    if target is None:
        return state
    return state, TARGETS[target].objects.filter(pk=getattr(world, target)).values().first()


def _call(client: APIClient, caller: str, world: World, method: str, url: str, body: Any):
    client.cookies.clear()  # nothing of one caller's answer reaches the next
    extra = {} if caller == "anon" else {"HTTP_AUTHORIZATION": f"Bearer {world.keys[caller]}"}
    if method in ("GET", "DELETE"):
        return getattr(client, method.lower())(url, **extra)
    return getattr(client, method.lower())(url, body or {}, format="json", **extra)


@pytest.mark.django_db
@pytest.mark.parametrize("operation", sorted(TABLE))
def test_each_caller_gets_the_declared_answer(world: World, operation: str) -> None:
    method, template = operation.split(" ", 1)
    spec = TABLE[operation]
    places = {"id": spec.on, **spec.args} if spec.on else spec.args
    url = template.format(**{name: getattr(world, attr) for name, attr in places.items()})
    body = spec.body(world) if callable(spec.body) else spec.body
    writes = method != "GET"
    before = _state(spec.target, world) if writes else None
    client, wrong = APIClient(), []
    for caller, expected in spec.answers.items():
        with transaction.atomic():
            response = _call(client, caller, world, method, url, body)
            status = response.status_code
            if status != expected:
                wrong.append(f"{caller}: {status} (declared {expected}) {response.content[:200]}")
            elif off := _off_schema(method, template, url, response):
                wrong.append(f"{caller}: {status}, an answer the schema does not allow: {off}")
            elif writes:
                # Refused: nothing changed. Allowed: something did (unless it saves nothing).
                changed = _state(spec.target, world) != before
                if changed != (status < 300 and spec.changes):
                    told = "changed" if changed else "did not change"
                    wrong.append(f"{caller}: {status}, but the database {told}")
            if status == 401 and not response.get("WWW-Authenticate", "").startswith("Bearer "):
                wrong.append(f"{caller}: 401 without a Bearer challenge")
            if caller == "read" and writes and status == 403:
                error = response.json()["error"]
                if error["code"] != "permission_denied" or error["message"] != str(READ_ONLY):
                    wrong.append(f"read: 403 but not for its scope: {error}")
            transaction.set_rollback(True)
    assert not wrong, f"{operation} {url}:\n" + "\n".join(wrong)
