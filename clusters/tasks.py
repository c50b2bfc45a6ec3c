from celery import shared_task

from clusters import sync
from clusters.models import Cluster


# Late acks: a sync reads each object and writes what the portal wants, so a second run
# after a lost worker finds them in step and writes nothing.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def sync_clusters() -> dict[str, str]:
    """Every CLUSTER_SYNC_EVERY_S: each cluster's quota objects put back in step."""
    return sync.sync_all()


# Late acks: as sync_clusters.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def sync_pool_clusters(pool_id: int) -> None:
    """After a quota of the pool changed: its clusters at once, not at the next round."""
    for cluster in Cluster.objects.filter(pool_id=pool_id).select_related("pool"):
        sync.sync_cluster(cluster)


# Late acks: a pass reads every Pod and its link first, so a second run after a lost worker
# asks nothing twice (one request per uid) and a gate removed twice is no error.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def pass_gated_workloads() -> dict[str, dict[str, str]]:
    """Every CLUSTER_GATE_EVERY_S: gated Pods become requests, decisions reach their Pods."""
    from clusters import gates

    return gates.pass_all()


# A burst of request steps asks for one pass: the first queues it this much later, the
# rest find the key (the pass deletes it as it starts).
PASS_DEBOUNCE_S = 2


def pass_asked_key(cluster_id: int) -> str:
    return f"clusters:gate-pass-asked:{cluster_id}"


# Late acks: as pass_gated_workloads.
@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True,
             max_retries=5)  # fmt: skip
def pass_cluster_workloads(self, cluster_id: int) -> dict[str, str]:
    """After a step of one of the cluster's workloads' requests (approved, placed, rejected,
    released): its pass at once, so a Pod starts seconds after the approval, not at the next
    round; again shortly when another pass of the cluster runs. A cluster gone is nothing."""
    from django.core.cache import cache

    from clusters import gates

    cache.delete(pass_asked_key(cluster_id))  # steps from now on ask for a pass of their own
    cluster = Cluster.objects.select_related("pool").filter(pk=cluster_id).first()
    if cluster is None:
        return {}
    results = gates.pass_cluster(cluster)
    if results == {"": gates.BUSY} and not self.request.is_eager:
        raise self.retry(countdown=2)
    return results
