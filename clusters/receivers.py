"""A quota saved or deleted: the clusters of its pool are synced once the change commits.
A lease warned that it will be taken back: the cluster workload holding it is to be told
(the next gate pass posts the Event, clusters.gates.carry). A step of a cluster workload's
request: that cluster's gate pass is run at once (clusters.tasks.pass_cluster_workloads)."""

from __future__ import annotations

from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from quotas.interface import request_event
from quotas.models import Quota
from reports.interface import reclaim_warned, reclaimed


@receiver(post_save, sender=Quota, dispatch_uid="clusters-quota-saved")
@receiver(post_delete, sender=Quota, dispatch_uid="clusters-quota-deleted")
def quota_changed(sender, instance: Quota, **kwargs) -> None:
    from clusters.models import Cluster
    from clusters.tasks import sync_pool_clusters

    pool_id = instance.pool_id
    if Cluster.objects.filter(pool_id=pool_id).exists():
        transaction.on_commit(lambda: sync_pool_clusters.delay(pool_id))


@receiver(reclaim_warned, dispatch_uid="clusters-reclaim-warned")
def reclaim_warned_heard(sender, lease_id: int, release_after, cause: str = "", **kwargs) -> None:
    from clusters.models import ClusterWorkload

    ClusterWorkload.objects.filter(request__lease_id=lease_id).update(
        reclaim_after=release_after, reclaim_cause=cause[:16], reclaim_told=False
    )


@receiver(reclaimed, dispatch_uid="clusters-reclaimed")
def reclaimed_heard(sender, lease_id: int, **kwargs) -> None:
    # Released by the reclaim itself (not withdrawn, then released by its owner): the
    # workload's last Event says it was taken back.
    from clusters.choices import TAKEN_BACK
    from clusters.models import ClusterWorkload

    ClusterWorkload.objects.filter(request__lease_id=lease_id).update(reclaim_cause=TAKEN_BACK)


@receiver(request_event, dispatch_uid="clusters-request-step")
def request_step(sender, request_id: int, **kwargs) -> None:
    from clusters import gates
    from clusters.models import ClusterWorkload
    from clusters.tasks import PASS_DEBOUNCE_S, pass_asked_key, pass_cluster_workloads

    if gates.in_pass():
        return  # the pass that made this step carries it itself
    cluster_id = (
        ClusterWorkload.objects.filter(request_id=request_id)
        .values_list("cluster_id", flat=True)
        .first()
    )
    # Steps come in bursts (approved, then placed; a pass's own steps, from the notice task
    # on a worker): one pass a second per cluster, started once the burst is in.
    if cluster_id is not None and cache.add(pass_asked_key(cluster_id), 1, timeout=PASS_DEBOUNCE_S):
        pass_cluster_workloads.apply_async((cluster_id,), countdown=PASS_DEBOUNCE_S / 2)
