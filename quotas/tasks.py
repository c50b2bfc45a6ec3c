"""Beat's work for GPU requests (scheduled in settings.CELERY_BEAT_SCHEDULE): place what
the queue can, and the timed steps. Each is idempotent: a second run finds nothing left to
do."""

from __future__ import annotations

from celery import shared_task

from quotas.choices import RequestState
from quotas.models import GpuRequest
from quotas.requests import lifecycle
from quotas.requests.notices import prune_sent, resend_untold
from quotas.requests.notices import send_notices as send_notices
from quotas.requests.services import place_queued


# Late acks: placement locks the pool and places only what is still approved and
# unplaced, so a run again after a lost worker places nothing twice.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def place_all_queued() -> int:
    """Place queued requests in every pool that has any (capacity freed elsewhere, a
    card back online): the short beat behind the placement after each release."""
    pools = GpuRequest.objects.filter(state=RequestState.APPROVED).values_list("pool_id", flat=True)
    return sum(place_queued(pool_id) for pool_id in set(pools))


# Late acks: each step moves a request out of the state it selects on (pending to
# escalated or expired, placed to expired; the expiry warning is stamped on the request
# with a conditional UPDATE), so a second run finds it done.
@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def sweep_requests() -> dict[str, int]:
    """Escalate and expire pending requests, warn before expiry, expire placed ones;
    send again the notices whose message was lost, forget those told long ago."""
    return {
        "escalated": lifecycle.escalate_pending(),
        "expired_pending": lifecycle.expire_pending(),
        "warned": lifecycle.warn_expiring(),
        "expired": lifecycle.expire_placed(),
        "notices_resent": resend_untold(),
        "notice_keys_pruned": prune_sent(),
    }
