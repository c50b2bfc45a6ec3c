"""Registering a cluster and mapping its namespaces: the one place both the pages and the
API go through, so both check the same things."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from audit.interface import record
from clusters.gates import PassRunning, hold_pass
from clusters.models import Cluster, ClusterWorkload, NamespaceMapping
from clusters.tasks import sync_pool_clusters
from quotas.choices import RequestState

# What a cluster may change while its workloads hold requests (the gate's kind and the
# sizing depend on the mode, so those wait until no workload holds one).
EDITABLE = ("name", "api_url", "ca_bundle", "enforcement", "kueue")
MODE = ("enforcement", "kueue")
HOLDING = (RequestState.PENDING, RequestState.APPROVED, RequestState.ALLOCATED)

PASS_WAIT_S = 10  # the longest an edit waits for a running gate pass of the cluster


class PassBusy(ValidationError):
    """A gate pass of the cluster held its lock past PASS_WAIT_S: nothing was changed."""


def _hold_pass(cluster: Cluster) -> None:
    """The gate pass's lock for this transaction: a pass that listed the mappings before
    this edit could otherwise admit a workload after the holding() check."""
    try:
        hold_pass(cluster.pk, PASS_WAIT_S)
    except PassRunning as exc:
        raise PassBusy(str(exc)) from exc


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


def holding(cluster: Cluster, namespace: str | None = None) -> int:
    """How many of the cluster's workloads (in the namespace) hold an open request."""
    rows = ClusterWorkload.objects.filter(cluster=cluster, request__state__in=HOLDING)
    if namespace is not None:
        rows = rows.filter(namespace=namespace)
    return rows.count()


def _still_held(count: int) -> str:
    return ngettext(
        "%(count)s workload of this cluster holds a GPU request: release it (or delete its "
        "Pod or Job) first.",
        "%(count)s workloads of this cluster hold GPU requests: release them (or delete their "
        "Pods and Jobs) first.",
        count,
    ) % {"count": count}


@transaction.atomic
def update_cluster(cluster: Cluster, *, actor, token: str = "", **fields) -> Cluster:
    """Change what EDITABLE names, and the token only when one is given (blank: kept). The
    pool stays (its objects in the cluster are labelled by it). A change of enforcement or
    Kueue waits until no workload holds a request. The cluster is synced once it commits."""
    _hold_pass(cluster)
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationError({name: [_("This cannot be changed.")] for name in sorted(unknown)})
    before = {name: getattr(cluster, name) for name in EDITABLE}
    for name, value in fields.items():
        setattr(cluster, name, value)
    changed = [name for name in EDITABLE if getattr(cluster, name) != before[name]]
    if any(name in MODE for name in changed) and (count := holding(cluster)):
        raise ValidationError({name: [_still_held(count)] for name in changed if name in MODE})
    if token:
        cluster.token = token
        changed.append("token")
    cluster.full_clean()
    cluster.save()
    after = {k: str(getattr(cluster, k)) for k in changed if k != "token"}
    if "token" in changed:
        after["token_hint"] = cluster.token_hint  # never the token itself
    record("cluster.updated", cluster, actor=actor,
           before={k: str(before[k]) for k in changed if k in before}, after=after)  # fmt: skip
    pool_id = cluster.pool_id
    transaction.on_commit(lambda: sync_pool_clusters.delay(pool_id))
    return cluster


@transaction.atomic
def delete_cluster(cluster: Cluster, *, actor) -> None:
    """Forget the cluster, its namespaces and its workloads' links; refused while a workload
    holds a request (its GPUs would have no one to end them). The portal's objects in the
    cluster are left there (the portal may no longer reach it)."""
    _hold_pass(cluster)
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    if count := holding(cluster):
        raise ValidationError(_still_held(count))
    record("cluster.deleted", cluster, actor=actor,
           before={"name": cluster.name, "api_url": cluster.api_url})  # fmt: skip
    from clusters.inventory import forget  # its nodes offline, their cards lost

    forget(cluster)
    cluster.delete()


@transaction.atomic
def unmap_namespace(cluster: Cluster, *, actor, namespace: str) -> None:
    """Remove the mapping; refused while a workload there holds a request (the pass lists
    mapped namespaces only, so it would never be carried again). The cluster's pool is
    synced once it commits: the namespace's queue or ResourceQuota goes."""
    _hold_pass(cluster)
    mapping = (
        NamespaceMapping.objects.select_for_update()
        .filter(cluster=cluster, namespace=namespace)
        .first()
    )
    if mapping is None:
        raise NamespaceMapping.DoesNotExist(namespace)
    if count := holding(cluster, namespace):
        raise ValidationError(_still_held(count))
    record("cluster.namespace_unmapped", cluster, actor=actor, tenant_id=mapping.tenant_id,
           before={"namespace": namespace, "tenant": mapping.tenant.slug})  # fmt: skip
    mapping.delete()
    pool_id = cluster.pool_id
    transaction.on_commit(lambda: sync_pool_clusters.delay(pool_id))


__all__ = [
    "PassBusy",
    "ValidationError",
    "delete_cluster",
    "holding",
    "map_namespace",
    "register_cluster",
    "unmap_namespace",
    "update_cluster",
]
