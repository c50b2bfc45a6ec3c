"""Registering a cluster and mapping its namespaces: the one place both the pages and the
API go through, so both check the same things."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from audit.interface import record
from clusters.models import Cluster, NamespaceMapping
from clusters.tasks import sync_pool_clusters


@transaction.atomic
def register_cluster(*, actor, token: str, **fields) -> Cluster:
    cluster = Cluster(**fields)
    cluster.token = token
    cluster.full_clean()
    cluster.save()
    record("cluster.registered", cluster, actor=actor, after={"api_url": cluster.api_url})
    return cluster


@transaction.atomic
def map_namespace(cluster: Cluster, *, actor, namespace: str, tenant) -> NamespaceMapping:
    mapping = NamespaceMapping(cluster=cluster, namespace=namespace, tenant=tenant)
    mapping.full_clean()  # the namespace's form and one tenant per namespace
    mapping.save()
    record("cluster.namespace_mapped", cluster, actor=actor, tenant_id=tenant.pk,
           after={"namespace": namespace, "tenant": tenant.slug})  # fmt: skip
    # The new namespace gets its queue now, not at the next periodic sync.
    transaction.on_commit(lambda: sync_pool_clusters.delay(cluster.pool_id))
    return mapping


__all__ = ["ValidationError", "map_namespace", "register_cluster"]
