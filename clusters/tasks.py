from celery import shared_task

from clusters import sync
from clusters.models import Cluster


@shared_task(ignore_result=True)
def sync_clusters() -> dict[str, str]:
    """Every CLUSTER_SYNC_EVERY_S: each cluster's quota objects put back in step."""
    return sync.sync_all()


@shared_task(ignore_result=True)
def sync_pool_clusters(pool_id: int) -> None:
    """After a quota of the pool changed: its clusters at once, not at the next round."""
    for cluster in Cluster.objects.filter(pool_id=pool_id).select_related("pool"):
        sync.sync_cluster(cluster)
